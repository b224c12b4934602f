package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// base is a fixed whole-second time: the scripts take "now" from the caller, so the
// tests need no clock.
var base = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func at(seconds int) time.Time { return base.Add(time.Duration(seconds) * time.Second) }

func dl(id string, seconds int) Deadline {
	return Deadline{SensorID: id, Deadline: at(seconds)}
}

func newRedis(t *testing.T) *RedisStore {
	t.Helper()
	ctx := context.Background()
	r, err := storage.OpenRedis(ctx, storagetest.RedisURL(t), storagetest.NewRedisPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return NewRedisStore(r)
}

// mustRecord records sightings due at the given deadlines, each seen at its deadline
// (Seen only matters to restores).
func mustRecord(t *testing.T, r *RedisStore, deadlines ...Deadline) []Restore {
	t.Helper()
	restores, err := r.RecordHeartbeats(context.Background(), sightings(deadlines...))
	if err != nil {
		t.Fatal(err)
	}
	return restores
}

func sightings(deadlines ...Deadline) []Sighting {
	out := make([]Sighting, len(deadlines))
	for i, d := range deadlines {
		out[i] = Sighting{SensorID: d.SensorID, Seen: d.Deadline, Deadline: d.Deadline}
	}
	return out
}

func status(t *testing.T, r *RedisStore, id string) RedisStatus {
	t.Helper()
	st, err := r.HeartbeatStatuses(context.Background(), []string{id})
	if err != nil {
		t.Fatal(err)
	}
	return st[id]
}

func counts(t *testing.T, r *RedisStore) (tracked, lost int64) {
	t.Helper()
	tracked, lost, err := r.CountHeartbeats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tracked, lost
}

func TestHeartbeatDeadlinesOnlyMoveForward(t *testing.T) {
	t.Parallel()
	r := newRedis(t)

	mustRecord(t, r, dl("a", 100), dl("b", 50))
	mustRecord(t, r, dl("a", 60), dl("b", 70)) // an older batch for a, a newer one for b
	if got := status(t, r, "a").Deadline; !got.Equal(at(100)) {
		t.Errorf("a deadline = %v, want %v (must not move back)", got, at(100))
	}
	if got := status(t, r, "b").Deadline; !got.Equal(at(70)) {
		t.Errorf("b deadline = %v, want %v", got, at(70))
	}
	if st := status(t, r, "nobody"); !st.Deadline.IsZero() || !st.Missed.IsZero() {
		t.Errorf("unknown sensor status = %+v, want zero", st)
	}
	if tracked, lost := counts(t, r); tracked != 2 || lost != 0 {
		t.Errorf("counts = %d tracked, %d lost; want 2, 0", tracked, lost)
	}
}

func TestHeartbeatLargeBatch(t *testing.T) {
	t.Parallel()
	r := newRedis(t)
	// More than one script's worth: split into several calls in one pipeline.
	batch := make([]Deadline, 2*MaxBatch+7)
	for i := range batch {
		batch[i] = dl(fmt.Sprintf("s%d", i), i)
	}
	mustRecord(t, r, batch...)
	if tracked, _ := counts(t, r); tracked != int64(len(batch)) {
		t.Fatalf("tracked = %d, want %d", tracked, len(batch))
	}
	claimed, err := r.ClaimHeartbeatExpired(context.Background(), at(len(batch)), 5*MaxBatch, at(10_000))
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != MaxBatch {
		t.Fatalf("claimed %d, want the limit clamped to %d", len(claimed), MaxBatch)
	}
}

func TestHeartbeatClaimExpired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	mustRecord(t, r, dl("a", 10), dl("b", 20), dl("c", 30), dl("d", 40))

	claimed, err := r.ClaimHeartbeatExpired(ctx, at(30), 2, at(100))
	if err != nil {
		t.Fatal(err)
	}
	if want := []Deadline{dl("a", 10), dl("b", 20)}; !equalDeadlines(claimed, want) {
		t.Fatalf("first chunk = %v, want %v", claimed, want)
	}
	claimed, err = r.ClaimHeartbeatExpired(ctx, at(30), 2, at(100))
	if err != nil {
		t.Fatal(err)
	}
	if want := []Deadline{dl("c", 30)}; !equalDeadlines(claimed, want) {
		t.Fatalf("second chunk = %v, want %v", claimed, want)
	}
	claimed, err = r.ClaimHeartbeatExpired(ctx, at(30), 2, at(100))
	if err != nil || len(claimed) != 0 {
		t.Fatalf("third chunk = %v, %v; want nothing", claimed, err)
	}
	if st := status(t, r, "a"); !st.Deadline.IsZero() || !st.Missed.Equal(at(10)) {
		t.Errorf("a status = %+v, want lost with missed deadline %v", st, at(10))
	}
	if tracked, lost := counts(t, r); tracked != 1 || lost != 3 {
		t.Errorf("counts = %d tracked, %d lost; want 1, 3", tracked, lost)
	}
}

func TestHeartbeatConcurrentClaimsNeverOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	const sensors = 500
	batch := make([]Deadline, sensors)
	for i := range batch {
		batch[i] = dl(fmt.Sprintf("s%d", i), i%50)
	}
	mustRecord(t, r, batch...)

	var (
		mu    sync.Mutex
		seen  = map[string]int{}
		wg    sync.WaitGroup
		errCh = make(chan error, 3)
	)
	for range 3 {
		wg.Go(func() {
			for {
				claimed, err := r.ClaimHeartbeatExpired(ctx, at(100), 7, at(1000))
				if err != nil {
					errCh <- err
					return
				}
				if len(claimed) == 0 {
					return
				}
				mu.Lock()
				for _, c := range claimed {
					seen[c.SensorID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errCh)
	for err := range errCh {
		t.Fatal(err)
	}
	if len(seen) != sensors {
		t.Fatalf("claimed %d distinct sensors, want %d", len(seen), sensors)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s claimed %d times", id, n)
		}
	}
}

func TestHeartbeatRestoreExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	mustRecord(t, r, dl("a", 10), dl("b", 10))
	claimed, err := r.ClaimHeartbeatExpired(ctx, at(10), 10, at(100))
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	if err := r.AckHeartbeatLosses(ctx, claimed[:1]); err != nil { // a published, b not yet
		t.Fatal(err)
	}

	// A sighting no later than the missed deadline is a replayed old batch: no restore.
	if got := mustRecord(t, r, dl("a", 10)); len(got) != 0 {
		t.Fatalf("stale sighting restored %v", got)
	}
	if st := status(t, r, "a"); !st.Deadline.IsZero() || st.Missed.IsZero() {
		t.Fatalf("stale sighting changed a: %+v", st)
	}

	got := mustRecord(t, r, dl("a", 50), dl("b", 50), dl("c", 50))
	want := []Restore{
		{SensorID: "a", Missed: at(10), RestoredAt: at(50)},
		{SensorID: "b", Missed: at(10), RestoredAt: at(50), Unpublished: true},
	}
	if !equalRestores(got, want) {
		t.Fatalf("restores = %+v, want %+v", got, want)
	}
	// Later sightings return the same restores, marked as remembered ones.
	got = mustRecord(t, r, dl("a", 60), dl("b", 60), dl("c", 60))
	want[0].Replay, want[1].Replay = true, true
	if !equalRestores(got, want) {
		t.Fatalf("second sighting = %+v, want the remembered restores %+v", got, want)
	}
	if tracked, lost := counts(t, r); tracked != 3 || lost != 0 {
		t.Errorf("counts = %d tracked, %d lost; want 3, 0", tracked, lost)
	}
	// b's loss is no longer pending: nothing to republish.
	if again, err := r.ReclaimHeartbeatPending(ctx, at(1000), 10, at(2000)); err != nil || len(again) != 0 {
		t.Errorf("reclaim after restore = %v, %v; want nothing", again, err)
	}
}

func TestHeartbeatRememberedRestores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	mustRecord(t, r, dl("a", 10), dl("b", 10), dl("c", 10))
	if _, err := r.ClaimHeartbeatExpired(ctx, at(10), 10, at(100)); err != nil {
		t.Fatal(err)
	}
	r1 := []Sighting{
		{SensorID: "a", Seen: at(20), Deadline: at(30)},
		{SensorID: "b", Seen: at(21), Deadline: at(31)},
		{SensorID: "c", Seen: at(22), Deadline: at(32)},
	}
	if got, err := r.RecordHeartbeats(ctx, r1); err != nil || len(got) != 3 {
		t.Fatalf("restores = %v, %v", got, err)
	}
	// a is lost again: its old restore is superseded. b's restore expires.
	if claimed, err := r.ClaimHeartbeatExpired(ctx, at(30), 10, at(100)); err != nil || len(claimed) != 1 {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	if n, err := r.ExpireHeartbeatRestores(ctx, at(21), 10); err != nil || n != 1 {
		t.Fatalf("expired %d, %v; want 1 (b's: a's went with its new loss, c's is newer)", n, err)
	}
	got, err := r.RecordHeartbeats(ctx, []Sighting{
		{SensorID: "b", Seen: at(40), Deadline: at(50)},
		{SensorID: "c", Seen: at(40), Deadline: at(50)},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Nobody confirmed the losses here, so each restore carries its unpublished loss.
	want := []Restore{{SensorID: "c", Missed: at(10), RestoredAt: at(22), Unpublished: true, Replay: true}}
	if !equalRestores(got, want) {
		t.Fatalf("remembered restores = %+v, want only c's %+v", got, want)
	}
	// a's next sighting ends its second loss, a fresh restore.
	got, err = r.RecordHeartbeats(ctx, []Sighting{{SensorID: "a", Seen: at(45), Deadline: at(55)}})
	if err != nil {
		t.Fatal(err)
	}
	want = []Restore{{SensorID: "a", Missed: at(30), RestoredAt: at(45), Unpublished: true}}
	if !equalRestores(got, want) {
		t.Fatalf("a = %+v, want %+v", got, want)
	}
	if err := r.ForgetHeartbeat(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if got := mustRecord(t, r, dl("c", 60)); len(got) != 0 {
		t.Fatalf("forgotten sensor's restore remembered: %+v", got)
	}
}

func TestHeartbeatConcurrentSightingsRestoreOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	mustRecord(t, r, dl("a", 10))
	if _, err := r.ClaimHeartbeatExpired(ctx, at(10), 10, at(100)); err != nil {
		t.Fatal(err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		restores int
	)
	for i := range 8 {
		wg.Go(func() {
			got, err := r.RecordHeartbeats(ctx, sightings(dl("a", 50+i)))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			for _, r := range got {
				if !r.Replay {
					restores++
				}
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if restores != 1 {
		t.Fatalf("restores = %d, want exactly 1", restores)
	}
}

func TestHeartbeatPendingLosses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	mustRecord(t, r, dl("a", 10), dl("b", 10))
	if _, err := r.ClaimHeartbeatExpired(ctx, at(10), 10, at(100)); err != nil {
		t.Fatal(err)
	}
	// Leases still run: nobody else may publish them.
	if got, err := r.ReclaimHeartbeatPending(ctx, at(99), 10, at(200)); err != nil || len(got) != 0 {
		t.Fatalf("reclaim before lease end = %v, %v", got, err)
	}
	// a's publisher failed and released it: due at once.
	if err := r.ReleaseHeartbeatLosses(ctx, []Deadline{dl("a", 10)}); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReclaimHeartbeatPending(ctx, at(11), 10, at(200))
	if err != nil || !equalDeadlines(got, []Deadline{dl("a", 10)}) {
		t.Fatalf("reclaim after release = %v, %v; want a", got, err)
	}
	// b's publisher died: after its lease, b comes back, once.
	got, err = r.ReclaimHeartbeatPending(ctx, at(150), 10, at(300))
	if err != nil || !equalDeadlines(got, []Deadline{dl("b", 10)}) {
		t.Fatalf("reclaim after lease = %v, %v; want b", got, err)
	}
	if err := r.AckHeartbeatLosses(ctx, []Deadline{dl("a", 10), dl("b", 10)}); err != nil {
		t.Fatal(err)
	}
	if got, err := r.ReclaimHeartbeatPending(ctx, at(10_000), 10, at(20_000)); err != nil || len(got) != 0 {
		t.Fatalf("reclaim after ack = %v, %v; want nothing", got, err)
	}
	// Releasing an acknowledged loss does not bring it back.
	if err := r.ReleaseHeartbeatLosses(ctx, []Deadline{dl("a", 10)}); err != nil {
		t.Fatal(err)
	}
	if got, err := r.ReclaimHeartbeatPending(ctx, at(10_000), 10, at(20_000)); err != nil || len(got) != 0 {
		t.Fatalf("reclaim after releasing an acked loss = %v, %v; want nothing", got, err)
	}
}

func TestHeartbeatAckKeepsNewerLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	mustRecord(t, r, dl("a", 10))
	if _, err := r.ClaimHeartbeatExpired(ctx, at(10), 10, at(100)); err != nil {
		t.Fatal(err)
	}
	mustRecord(t, r, dl("a", 20)) // restored before the first loss was confirmed
	if _, err := r.ClaimHeartbeatExpired(ctx, at(20), 10, at(100)); err != nil {
		t.Fatal(err)
	}
	// A slow publisher confirms the first loss: the second must stay pending.
	if err := r.AckHeartbeatLosses(ctx, []Deadline{dl("a", 10)}); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReclaimHeartbeatPending(ctx, at(101), 10, at(200))
	if err != nil || !equalDeadlines(got, []Deadline{dl("a", 20)}) {
		t.Fatalf("reclaim = %v, %v; want a's second loss", got, err)
	}
}

func TestHeartbeatForget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	mustRecord(t, r, dl("a", 10), dl("b", 10))
	if _, err := r.ClaimHeartbeatExpired(ctx, at(10), 1, at(100)); err != nil { // a lost and pending
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "never"} {
		if err := r.ForgetHeartbeat(ctx, id); err != nil {
			t.Fatal(err)
		}
		if st := status(t, r, id); !st.Deadline.IsZero() || !st.Missed.IsZero() {
			t.Errorf("%s after forget = %+v", id, st)
		}
	}
	if tracked, lost := counts(t, r); tracked != 0 || lost != 0 {
		t.Errorf("counts = %d, %d; want 0, 0", tracked, lost)
	}
	if got, err := r.ReclaimHeartbeatPending(ctx, at(1000), 10, at(2000)); err != nil || len(got) != 0 {
		t.Errorf("reclaim after forget = %v, %v", got, err)
	}
}

func TestHeartbeatLostListing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	var batch []Deadline
	for i := range 25 {
		batch = append(batch, dl(fmt.Sprintf("s%02d", i), i))
	}
	mustRecord(t, r, batch...)
	if _, err := r.ClaimHeartbeatExpired(ctx, at(19), 100, at(100)); err != nil { // s00..s19
		t.Fatal(err)
	}
	var all []Deadline
	page := storage.Page{Limit: 7}
	for {
		got, err := r.LostHeartbeats(ctx, page)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got...)
		if len(got) < page.Limit {
			break
		}
		page.After = got[len(got)-1].SensorID
	}
	if !equalDeadlines(all, batch[:20]) {
		t.Fatalf("lost listing = %v, want %v", all, batch[:20])
	}
}

func TestHeartbeatShiftDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	mustRecord(t, r, dl("a", 100))
	if err := r.ShiftHeartbeatDeadline(ctx, "a", -30*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := status(t, r, "a").Deadline; !got.Equal(at(70)) {
		t.Errorf("a deadline = %v, want %v", got, at(70))
	}
	if err := r.ShiftHeartbeatDeadline(ctx, "untracked", time.Minute); err != nil {
		t.Fatal(err)
	}
	if st := status(t, r, "untracked"); !st.Deadline.IsZero() {
		t.Errorf("shift created an untracked sensor: %+v", st)
	}
}

func TestHeartbeatMarkerAndLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	if ok, err := r.HeartbeatMarker(ctx); err != nil || ok {
		t.Fatalf("marker on empty redis = %v, %v", ok, err)
	}
	if err := r.SetHeartbeatMarker(ctx, base); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.HeartbeatMarker(ctx); err != nil || !ok {
		t.Fatalf("marker after set = %v, %v", ok, err)
	}

	token, ok, err := r.LockHeartbeatRebuild(ctx, time.Minute)
	if err != nil || !ok {
		t.Fatalf("first lock = %v, %v", ok, err)
	}
	if _, ok, err := r.LockHeartbeatRebuild(ctx, time.Minute); err != nil || ok {
		t.Fatalf("second lock = %v, %v; want refused", ok, err)
	}
	if err := r.UnlockHeartbeatRebuild(ctx, "someone else"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := r.LockHeartbeatRebuild(ctx, time.Minute); ok {
		t.Fatal("a stranger's unlock released the lock")
	}
	if err := r.UnlockHeartbeatRebuild(ctx, token); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := r.LockHeartbeatRebuild(ctx, time.Minute); err != nil || !ok {
		t.Fatalf("lock after unlock = %v, %v", ok, err)
	}
}

func TestHeartbeatLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	// Live state: a tracked at 100, l lost (missed 10), s reported since Redis lost
	// its data.
	mustRecord(t, r, dl("a", 100), dl("l", 10), dl("s", 500))
	if _, err := r.ClaimHeartbeatExpired(ctx, at(10), 10, at(100)); err != nil {
		t.Fatal(err)
	}

	n, err := r.LoadHeartbeatDeadlines(ctx, []Deadline{dl("a", 50), dl("b", 80), dl("l", 90)})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("loaded %d deadlines, want 2 (l is lost)", n)
	}
	if got := status(t, r, "a").Deadline; !got.Equal(at(100)) {
		t.Errorf("a = %v, want its live deadline %v kept", got, at(100))
	}
	if got := status(t, r, "b").Deadline; !got.Equal(at(80)) {
		t.Errorf("b = %v, want %v", got, at(80))
	}
	if st := status(t, r, "l"); !st.Deadline.IsZero() || !st.Missed.Equal(at(10)) {
		t.Errorf("l = %+v, want still lost", st)
	}

	seen, err := r.LoadHeartbeatLosses(ctx, []Deadline{dl("l", 5), dl("s", 400), dl("x", 30)})
	if err != nil {
		t.Fatal(err)
	}
	if !equalDeadlines(seen, []Deadline{dl("s", 500)}) {
		t.Errorf("reported since = %v, want s with its deadline", seen)
	}
	if st := status(t, r, "l"); !st.Missed.Equal(at(10)) {
		t.Errorf("l missed = %v, want the live loss %v kept", st.Missed, at(10))
	}
	if st := status(t, r, "x"); !st.Missed.Equal(at(30)) || !st.Deadline.IsZero() {
		t.Errorf("x = %+v, want lost with missed %v", st, at(30))
	}
	if st := status(t, r, "s"); st.Deadline.IsZero() || !st.Missed.IsZero() {
		t.Errorf("s = %+v, want online", st)
	}
	// x's next sighting ends the loss loaded from the history, under its deadline.
	got := mustRecord(t, r, dl("x", 600))
	if len(got) != 1 || got[0].SensorID != "x" || !got[0].Missed.Equal(at(30)) || got[0].Unpublished {
		t.Errorf("x restore = %+v", got)
	}
}

func TestHeartbeatPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	pg := NewPostgresStore(stores.Postgres)
	plain, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: "plain", Address: "1 Main St"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: "slow", Address: "2 Main St", HeartbeatTimeout: 3 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	timeouts, err := pg.HeartbeatTimeouts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(timeouts) != 1 || timeouts["slow"] != 3*time.Hour {
		t.Errorf("timeouts = %v, want only slow: 3h", timeouts)
	}
	got := map[string]RegisteredSensor{}
	if err := pg.EachHeartbeatSensor(ctx, func(s RegisteredSensor) error {
		got[s.ID] = s
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["plain"].Timeout != 0 || got["slow"].Timeout != 3*time.Hour ||
		!got["plain"].CreatedAt.Equal(plain.CreatedAt) {
		t.Errorf("sensors = %+v", got)
	}
	// One sensor's timeout, for the admin API's changes: 0 is the fleet's.
	for id, want := range map[string]time.Duration{"plain": 0, "slow": 3 * time.Hour} {
		if got, err := pg.HeartbeatTimeout(ctx, id); err != nil || got != want {
			t.Errorf("timeout of %s = %v, %v; want %v", id, got, err, want)
		}
	}
	if _, err := pg.HeartbeatTimeout(ctx, "nobody"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("timeout of an unregistered sensor: %v, want ErrNotFound", err)
	}
}

func TestHeartbeatClickHouse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	insertHistory(t, stores.ClickHouseURL,
		[]reading{{"a", at(10)}, {"a", at(30)}, {"b", at(20)}},
		[]connEvent{
			{"a", "connection_lost", at(100)},
			{"a", "connection_restored", at(200)},
			{"b", "connection_lost", at(300)},
			{"c", "connection_lost", at(100)},
			{"c", "connection_restored", at(150)},
			{"c", "connection_lost", at(400)},
			{"d", "state_changed", at(500)},
		})

	ch := NewClickHouseStore(stores.ClickHouse)
	last := map[string]time.Time{}
	if err := ch.EachLastReading(ctx, func(id string, t time.Time) error {
		last[id] = t
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(last) != 2 || !last["a"].Equal(at(30)) || !last["b"].Equal(at(20)) {
		t.Errorf("last readings = %v", last)
	}
	open := map[string]time.Time{}
	if err := ch.EachOpenLoss(ctx, func(id string, t time.Time) error {
		open[id] = t
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(open) != 2 || !open["b"].Equal(at(300)) || !open["c"].Equal(at(400)) {
		t.Errorf("open losses = %v, want b at %v and c at %v", open, at(300), at(400))
	}
}

type reading struct {
	sensor string
	at     time.Time
}

type connEvent struct {
	sensor, typ string
	at          time.Time
}

// insertHistory writes history rows the way the history writer does (native batch
// with named columns, the only INSERT ClickHouse 18.16 accepts from clickhouse-go).
func insertHistory(t *testing.T, url string, readings []reading, events []connEvent) {
	t.Helper()
	ctx := context.Background()
	opts, err := clickhouse.ParseDSN(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if len(readings) > 0 {
		batch, err := conn.PrepareBatch(ctx, "INSERT INTO readings (sensor_id, data, ts, received_at, kafka_partition, kafka_offset)")
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range readings {
			if err := batch.Append(r.sensor, uint8(1), r.at, r.at, int32(0), int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := batch.Send(); err != nil {
			t.Fatal(err)
		}
	}
	if len(events) > 0 {
		batch, err := conn.PrepareBatch(ctx, "INSERT INTO events (id, type, sensor_id, data, previous, at)")
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range events {
			if err := batch.Append(fmt.Sprintf("id%d", i), e.typ, e.sensor, nil, nil, e.at); err != nil {
				t.Fatal(err)
			}
		}
		if err := batch.Send(); err != nil {
			t.Fatal(err)
		}
	}
}

func equalRestores(got, want []Restore) bool {
	slices.SortFunc(got, func(x, y Restore) int { return strings.Compare(x.SensorID, y.SensorID) })
	return slices.EqualFunc(got, want, func(x, y Restore) bool {
		return x.SensorID == y.SensorID && x.Missed.Equal(y.Missed) && x.RestoredAt.Equal(y.RestoredAt) &&
			x.Unpublished == y.Unpublished && x.Replay == y.Replay
	})
}

func equalDeadlines(a, b []Deadline) bool {
	return slices.EqualFunc(a, b, func(x, y Deadline) bool {
		return x.SensorID == y.SensorID && x.Deadline.Equal(y.Deadline)
	})
}
