package heartbeat_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

func TestSilentSensorLostOnceThenRestoredOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d, dreg := b.newDaemon(t, nil)

	if events := b.record(t, b.tracker, "quiet", "chatty"); len(events) != 0 {
		t.Fatalf("first sightings emitted %v", events)
	}
	// chatty reports every second, quiet never again; quiet is due at t0+3.
	for s := 1; s <= 6; s++ {
		b.advance(float64(s))
		b.record(t, b.tracker, "chatty")
		sweep(t, d)
	}
	events := b.published(t)
	if len(events) != 1 {
		t.Fatalf("published %d events, want exactly quiet's loss: %+v", len(events), events)
	}
	lost := events[0]
	if lost.Type != event.ConnectionLost || lost.SensorID != "quiet" || !lost.At.Equal(b.at(3)) ||
		lost.ID != event.ConnectionLostID("quiet", b.at(3)) {
		t.Fatalf("loss = %+v, want quiet lost at its deadline %v", lost, b.at(3))
	}

	lastSeen, conn, err := b.tracker.Status(ctx, "quiet")
	if err != nil {
		t.Fatal(err)
	}
	if conn != heartbeat.ConnectionLost || lastSeen.Before(b.t0) || !lastSeen.Before(b.at(1)) {
		t.Errorf("quiet status = %v, %s; want lost, last seen within a second of %v", lastSeen, conn, b.t0)
	}
	if _, conn, _ := b.tracker.Status(ctx, "chatty"); conn != heartbeat.ConnectionOnline {
		t.Errorf("chatty connection = %s, want online", conn)
	}
	if _, conn, _ := b.tracker.Status(ctx, "stranger"); conn != heartbeat.ConnectionUnknown {
		t.Errorf("stranger connection = %s, want unknown", conn)
	}
	lostNow, err := b.tracker.LostSensors(ctx, storage.Page{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(lostNow) != 1 || lostNow[0].SensorID != "quiet" || !lostNow[0].LostAt.Equal(b.at(3)) {
		t.Errorf("lost listing = %+v, want quiet", lostNow)
	}

	b.advance(7)
	restored := b.record(t, b.tracker, "quiet", "chatty")
	if len(restored) != 1 {
		t.Fatalf("sighting of a lost sensor emitted %d events, want 1: %+v", len(restored), restored)
	}
	r := restored[0]
	if r.Type != event.ConnectionRestored || r.SensorID != "quiet" || !r.At.Equal(b.at(7)) ||
		r.ID != event.ConnectionRestoredID("quiet", b.at(3)) || r.SilentFor < 5 || r.SilentFor > 7 {
		t.Fatalf("restore = %+v, want quiet restored at %v, silent about 7s, id from the missed deadline", r, b.at(7))
	}
	if r.LostSince == nil || int64(r.At.Sub(*r.LostSince)/time.Second) != r.SilentFor {
		t.Fatalf("restore's lost_since = %v, want the last reading before the loss, %ds before %v", r.LostSince, r.SilentFor, r.At)
	}
	b.advance(8)
	if again := b.record(t, b.tracker, "quiet"); len(again) != 0 {
		t.Fatalf("second sighting emitted %v", again)
	}
	sweep(t, d)
	if n := len(b.published(t)); n != 1 {
		t.Fatalf("%d events on the topic after the restore, want still 1", n)
	}
	if _, conn, _ := b.tracker.Status(ctx, "quiet"); conn != heartbeat.ConnectionOnline {
		t.Errorf("quiet connection after restore = %s, want online", conn)
	}
	if got := counter(t, dreg, "lockstream_heartbeat_lost_total"); got != 1 {
		t.Errorf("lost_total = %v, want 1", got)
	}
	if got := counter(t, b.reg, "lockstream_heartbeat_restored_total"); got != 1 {
		t.Errorf("restored_total = %v, want 1", got)
	}
	if got := counter(t, dreg, "lockstream_heartbeat_tracked_sensors"); got != 2 {
		t.Errorf("tracked_sensors = %v, want 2", got)
	}
	if got := counter(t, dreg, "lockstream_heartbeat_lost_sensors"); got != 0 {
		t.Errorf("lost_sensors = %v, want 0", got)
	}
}

func TestRunPublishesLossesAndStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, reg := b.newDaemon(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	b.record(t, b.tracker, "quiet", "chatty")
	b.advance(1.5)
	b.record(t, b.tracker, "chatty") // due at t0+4
	b.advance(3)                     // quiet due now
	waitFor(t, "quiet's loss", func() bool { return counter(t, reg, "lockstream_heartbeat_lost_total") >= 1 })
	n := sweeps(t, reg)
	waitFor(t, "two more sweeps", func() bool { return sweeps(t, reg) >= n+2 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v on cancel, want nil", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	events := b.published(t)
	if got := ofType(events, event.ConnectionLost); len(events) != 1 || got["quiet"] != 1 {
		t.Fatalf("published %+v, want exactly one loss, of quiet", events)
	}
}

func TestThreeDaemonsReportEachLossOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var silent, chatty []string
	for i := range 60 {
		silent = append(silent, fmt.Sprintf("silent%d", i))
	}
	for i := range 20 {
		chatty = append(chatty, fmt.Sprintf("chatty%d", i))
	}
	b.record(t, b.tracker, append(silent, chatty...)...)
	b.advance(1.5)
	b.record(t, b.tracker, chatty...)
	b.advance(3) // every silent sensor is due; chatty ones at t0+4

	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg   sync.WaitGroup
		regs []func() (lost float64, sweeps uint64)
	)
	for range 3 {
		d, reg := b.newDaemon(t, nil)
		regs = append(regs, func() (float64, uint64) {
			return counter(t, reg, "lockstream_heartbeat_lost_total"), sweeps(t, reg)
		})
		wg.Go(func() {
			if err := d.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	total := func() (lost float64, minSweeps uint64) {
		minSweeps = ^uint64(0)
		for _, get := range regs {
			l, s := get()
			lost += l
			minSweeps = min(minSweeps, s)
		}
		return lost, minSweeps
	}
	waitFor(t, "60 losses", func() bool { l, _ := total(); return l >= 60 })
	_, s := total()
	waitFor(t, "every daemon to sweep twice more", func() bool { _, now := total(); return now >= s+2 })
	cancel()
	wg.Wait()

	events := b.published(t)
	lost := ofType(events, event.ConnectionLost)
	if len(events) != 60 || len(lost) != 60 {
		t.Fatalf("published %d events for %d sensors, want 60 losses of 60 sensors", len(events), len(lost))
	}
	for _, id := range silent {
		if lost[id] != 1 {
			t.Errorf("%s lost %d times", id, lost[id])
		}
	}
	if l, _ := total(); l != 60 {
		t.Errorf("lost_total over the daemons = %v, want 60", l)
	}

	// Three trackers (three consumer processes) see the silent sensors again at once:
	// each loss ends once. The two trackers that did not end it also return the
	// restore, as they would after taking over from a crashed consumer, under the
	// same id, which downstream drops.
	regs3 := []*prometheus.Registry{b.reg, prometheus.NewRegistry(), prometheus.NewRegistry()}
	trackers := []*heartbeat.Tracker{b.tracker, b.newTracker(t, regs3[1]), b.newTracker(t, regs3[2])}
	b.advance(5)
	var (
		mu       sync.Mutex
		restored = map[string]map[string]int{} // sensor → restore id → copies
	)
	for _, tr := range trackers {
		wg.Go(func() {
			seen := map[string]time.Time{}
			for _, id := range silent {
				seen[id] = b.clock.Now()
			}
			events, err := tr.Record(context.Background(), seen)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, e := range events {
				if e.Type == event.ConnectionRestored {
					if restored[e.SensorID] == nil {
						restored[e.SensorID] = map[string]int{}
					}
					restored[e.SensorID][e.ID]++
				}
			}
		})
	}
	wg.Wait()
	for _, id := range silent {
		if len(restored[id]) != 1 || restored[id][event.ConnectionRestoredID(id, b.at(3))] == 0 {
			t.Errorf("%s restores = %v, want one restore id, of its loss", id, restored[id])
		}
	}
	var fresh float64
	for _, reg := range regs3 {
		fresh += counter(t, reg, "lockstream_heartbeat_restored_total")
	}
	if fresh != 60 {
		t.Errorf("losses ended = %v, want 60: each exactly once", fresh)
	}
}

func TestRestartedConsumerGetsTheRestoreAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.RestoreMemory = 10 * time.Second
	d, _ := b.newDaemon(t, nil)
	b.record(t, b.tracker, "quiet")
	b.advance(3)
	sweep(t, d)
	b.advance(4)
	first := b.record(t, b.tracker, "quiet")
	if len(first) != 1 || first[0].Type != event.ConnectionRestored {
		t.Fatalf("restore = %+v", first)
	}
	// The consumer crashed before producing it; its successor replays the batch.
	restarted := b.newTracker(t, prometheus.NewRegistry())
	again := b.record(t, restarted, "quiet")
	if len(again) != 1 || !reflect.DeepEqual(again[0], first[0]) {
		t.Fatalf("replayed batch gave %+v, want the same restore %+v", again, first)
	}
	// Neither gets it again; quiet keeps reporting.
	for s := 6; s <= 14; s += 2 {
		b.advance(float64(s))
		if more := b.record(t, restarted, "quiet"); len(more) != 0 {
			t.Fatalf("at t0+%d the restarted consumer got %+v", s, more)
		}
		if more := b.record(t, b.tracker, "quiet"); len(more) != 0 {
			t.Fatalf("at t0+%d the first consumer got %+v", s, more)
		}
	}
	// RestoreMemory after the restore, a sweep forgets it.
	b.advance(15)
	sweep(t, d)
	if more := b.record(t, b.newTracker(t, prometheus.NewRegistry()), "quiet"); len(more) != 0 {
		t.Fatalf("a restore remembered past RestoreMemory: %+v", more)
	}
	if events := b.published(t); len(events) != 1 {
		t.Fatalf("published %+v, want quiet's one loss", events)
	}
}

func TestRedisDataLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pg := b.stores.Postgres
	for _, id := range []string{"h1", "h2", "h3", "s1", "s2", "s3"} {
		if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: id, Address: "somewhere"}); err != nil {
			t.Fatal(err)
		}
	}
	// L, R and O have a 1 s timeout: they are lost before Redis loses its data.
	for _, id := range []string{"L", "R", "O"} {
		if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: id, Address: "somewhere", HeartbeatTimeout: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	// Every sensor was registered before t0.
	b.t0 = time.Now().UTC().Truncate(time.Second).Add(time.Second)
	b.clock.Set(b.t0)
	d, reg := b.newDaemon(t, nil)
	if err := d.Rebuild(ctx); err != nil { // the first start
		t.Fatal(err)
	}

	b.record(t, b.tracker, "h1", "h2", "h3", "s1", "s2", "s3", "L", "R") // O never reports
	b.advance(1.5)
	b.record(t, b.tracker, "h1", "h2", "h3", "s3")
	b.advance(2)
	sweep(t, d)
	before := b.published(t)
	if lost := ofType(before, event.ConnectionLost); len(before) != 3 || lost["L"] != 1 || lost["R"] != 1 || lost["O"] != 1 {
		t.Fatalf("before the flush: %+v, want the losses of L, R and O", before)
	}

	// The history writer has stored the losses and readings up to t0+1 (whole
	// seconds), but it lags: h3's sighting at t0+1.5 is not there yet.
	readings := []chReading{{"h1", b.at(1)}, {"h2", b.at(1)}, {"h3", b.t0}, {"s1", b.t0}, {"s2", b.t0}, {"s3", b.at(1)}, {"L", b.t0}, {"R", b.t0}}
	insertHistory(t, b.stores.ClickHouseURL, readings, before)

	b.flushRedis(t)
	b.advance(2.5)
	b.record(t, b.tracker, "h1", "h2", "R") // sightings between the loss of data and the rebuild
	b.advance(3.5)
	sweep(t, d) // rebuilds
	if got := counter(t, reg, "lockstream_heartbeat_rebuilds_total"); got != 2 {
		t.Fatalf("rebuilds_total = %v, want 2 (start and after the flush)", got)
	}
	afterRebuild := b.published(t)[len(before):]
	if len(afterRebuild) != 1 || afterRebuild[0].Type != event.ConnectionRestored || afterRebuild[0].SensorID != "R" ||
		afterRebuild[0].ID != event.ConnectionRestoredID("R", findEvent(t, before, "R").At) {
		t.Fatalf("the rebuild published %+v, want only R's restore (it reported while Redis had no loss for it)", afterRebuild)
	}
	for id, want := range map[string]string{"h3": heartbeat.ConnectionOnline, "s1": heartbeat.ConnectionOnline,
		"L": heartbeat.ConnectionLost, "O": heartbeat.ConnectionLost, "R": heartbeat.ConnectionOnline} {
		if _, conn, err := b.tracker.Status(ctx, id); err != nil || conn != want {
			t.Errorf("%s after rebuild: %s, %v; want %s", id, conn, err, want)
		}
	}

	b.advance(4)
	b.record(t, b.tracker, "h1", "h2", "h3", "R")
	sweep(t, d) // s3: last reading t0+1 in the history, due t0+4
	b.advance(6)
	b.record(t, b.tracker, "h1", "h2", "h3", "R")
	sweep(t, d) // s1, s2: overdue at the rebuild, given a full timeout, due t0+6

	b.advance(6.5)
	events := b.record(t, b.tracker, "L")
	if len(events) != 1 || events[0].Type != event.ConnectionRestored ||
		events[0].ID != event.ConnectionRestoredID("L", findEvent(t, before, "L").At) {
		t.Fatalf("L's sighting emitted %+v, want the restore of its loss from before the flush", events)
	}

	all := b.published(t)
	lost := ofType(all, event.ConnectionLost)
	want := map[string]int{"L": 1, "R": 1, "O": 1, "s1": 1, "s2": 1, "s3": 1}
	if len(lost) != len(want) {
		t.Errorf("losses = %v, want %v", lost, want)
	}
	for id, n := range want {
		if lost[id] != n {
			t.Errorf("%s lost %d times, want %d (all losses: %v)", id, lost[id], n, lost)
		}
	}
	if s3 := findEvent(t, all, "s3"); !s3.At.Equal(b.at(4)) {
		t.Errorf("s3 lost at %v, want its rebuilt deadline %v", s3.At, b.at(4))
	}
}

func TestPublishFailureIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	flaky := &flakyPublisher{next: b.publisher(t), failures: 2}
	d, reg := b.newDaemon(t, flaky)
	b.record(t, b.tracker, "quiet")
	b.advance(3)

	for i := range 2 {
		if err := d.Sweep(context.Background()); !errors.Is(err, errBrokerDown) {
			t.Fatalf("sweep %d: err = %v, want the publisher's", i, err)
		}
	}
	if events := b.published(t); len(events) != 0 {
		t.Fatalf("published %v while the broker was down", events)
	}
	sweep(t, d)
	sweep(t, d)
	events := b.published(t)
	if len(events) != 1 || events[0].SensorID != "quiet" || events[0].ID != event.ConnectionLostID("quiet", b.at(3)) {
		t.Fatalf("published %+v, want quiet's loss once", events)
	}
	if got := counter(t, reg, "lockstream_heartbeat_lost_total"); got != 1 {
		t.Errorf("lost_total = %v, want 1", got)
	}
}

func TestLossOfADeadPublisherIsPublishedAfterItsLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d, _ := b.newDaemon(t, nil)
	sweep(t, d) // first start: builds the marker
	b.record(t, b.tracker, "quiet")
	b.advance(3)
	// Another daemon claims quiet and dies before publishing.
	lease := b.clock.Now().Add(2 * heartbeat.DefaultPublishTimeout)
	if claimed, err := b.hb.Redis.ClaimHeartbeatExpired(ctx, b.clock.Now(), 10, lease); err != nil || len(claimed) != 1 {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	sweep(t, d)
	if events := b.published(t); len(events) != 0 {
		t.Fatalf("published %v while the other daemon's lease runs", events)
	}
	b.clock.Set(lease.Add(time.Millisecond))
	sweep(t, d)
	sweep(t, d)
	events := b.published(t)
	if len(events) != 1 || events[0].ID != event.ConnectionLostID("quiet", b.at(3)) {
		t.Fatalf("published %+v, want quiet's loss once", events)
	}
}

func TestRestoreOfAnUnpublishedLossCarriesTheLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.record(t, b.tracker, "quiet")
	b.advance(3)
	// A sweep has claimed quiet and is still publishing when quiet reports.
	if _, err := b.hb.Redis.ClaimHeartbeatExpired(ctx, b.clock.Now(), 10, b.at(60)); err != nil {
		t.Fatal(err)
	}
	b.advance(4)
	events := b.record(t, b.tracker, "quiet")
	if len(events) != 2 ||
		events[0].Type != event.ConnectionLost || events[0].ID != event.ConnectionLostID("quiet", b.at(3)) ||
		events[1].Type != event.ConnectionRestored || events[1].ID != event.ConnectionRestoredID("quiet", b.at(3)) {
		t.Fatalf("events = %+v, want quiet's loss then its restore", events)
	}
}

func TestCoalescingNeverShortensTheTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.newDaemon(t, nil)
	b.record(t, b.tracker, "s")
	b.advance(0.15)
	b.record(t, b.tracker, "s") // within 10% of the timeout: no write
	if saved, writes := counter(t, b.reg, "lockstream_heartbeat_sighting_writes_saved_total"),
		counter(t, b.reg, "lockstream_heartbeat_sighting_writes_total"); saved != 1 || writes != 1 {
		t.Fatalf("saved = %v, writes = %v; want 1, 1", saved, writes)
	}
	// 1.95 s after its last reading s is not lost, though its last written sighting is
	// 2.1 s old: deadlines carry the coalescing window.
	b.advance(2.1)
	sweep(t, d)
	if events := b.published(t); len(events) != 0 {
		t.Fatalf("lost before its timeout: %+v", events)
	}
	b.advance(3)
	sweep(t, d)
	if events := b.published(t); len(events) != 1 || events[0].SensorID != "s" {
		t.Fatalf("published %+v, want s lost", events)
	}
	// Past the window, a sighting is written again.
	b.advance(3.5)
	b.record(t, b.tracker, "s")
	if writes := counter(t, b.reg, "lockstream_heartbeat_sighting_writes_total"); writes != 2 {
		t.Fatalf("writes = %v, want 2", writes)
	}
}

func TestPerSensorTimeouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pg := b.stores.Postgres
	if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: "slow", Address: "x", HeartbeatTimeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"fast", "patched"} {
		if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: id, Address: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := b.newDaemon(t, nil)
	sweep(t, d) // first start
	b.record(t, b.tracker, "slow", "fast", "patched")

	// PATCH patched to 10 s, in this process: its deadline moves at once.
	ten := 10 * time.Second
	if _, err := registry.New(pg).UpdateSensor(ctx, "patched", registry.SensorUpdate{HeartbeatTimeout: &ten}); err != nil {
		t.Fatal(err)
	}
	if err := b.tracker.SetTimeout(ctx, "patched", ten); err != nil {
		t.Fatal(err)
	}
	b.advance(3.5)
	sweep(t, d) // fast (due t0+3)
	b.advance(7)
	sweep(t, d) // slow (due t0+6)
	lost := ofType(b.published(t), event.ConnectionLost)
	if len(lost) != 2 || lost["fast"] != 1 || lost["slow"] != 1 {
		t.Fatalf("losses by t0+7 = %v, want fast and slow", lost)
	}
	b.advance(12)
	sweep(t, d) // patched (due t0+11 + the rounding of its shift)
	if lost := ofType(b.published(t), event.ConnectionLost); lost["patched"] != 1 {
		t.Fatalf("losses by t0+12 = %v, want patched too", lost)
	}

	// A timeout set by another process (the API's) reaches this tracker within
	// TimeoutRefresh.
	if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: "remote", Address: "x", HeartbeatTimeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	b.advance(100) // past the refresh interval (1 min)
	b.record(t, b.tracker, "remote")
	b.advance(104) // would be lost with the old 2 s timeout
	sweep(t, d)
	if lost := ofType(b.published(t), event.ConnectionLost); lost["remote"] != 0 {
		t.Fatalf("remote lost with its old timeout: %v", lost)
	}
	b.advance(106)
	sweep(t, d)
	if lost := ofType(b.published(t), event.ConnectionLost); lost["remote"] != 1 {
		t.Fatalf("remote not lost after its new timeout: %v", lost)
	}
}

func TestRegisterAndForget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d, _ := b.newDaemon(t, nil)
	sweep(t, d) // first start
	if err := b.tracker.Register(ctx, "newbie", b.t0); err != nil {
		t.Fatal(err)
	}
	b.record(t, b.tracker, "gone")
	if err := b.tracker.Forget(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, conn, _ := b.tracker.Status(ctx, "gone"); conn != heartbeat.ConnectionUnknown {
		t.Errorf("forgotten sensor is %s, want unknown", conn)
	}
	b.advance(3)
	sweep(t, d)
	events := b.published(t)
	if len(events) != 1 || events[0].SensorID != "newbie" || events[0].ID != event.ConnectionLostID("newbie", b.at(3)) {
		t.Fatalf("published %+v, want only newbie's loss (it never reported)", events)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (heartbeat.Config{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	bad := heartbeat.Config{Timeout: time.Millisecond, CoalesceFraction: 1.5, ClaimBatch: heartbeat.MaxBatch + 1}.WithDefaults()
	err := bad.Validate()
	for _, field := range []string{"Timeout", "CoalesceFraction", "ClaimBatch"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("error %v does not name %s", err, field)
		}
	}
	if _, err := heartbeat.New(heartbeat.Config{}, heartbeat.Deps{}, prometheus.NewRegistry(), discard()); err == nil ||
		!strings.Contains(err.Error(), "Deps.Publisher") {
		t.Errorf("New without deps: %v, want the missing deps named", err)
	}
}

func findEvent(t *testing.T, events []event.Event, sensor string) event.Event {
	t.Helper()
	for _, e := range events {
		if e.SensorID == sensor {
			return e
		}
	}
	t.Fatalf("no event of %s in %+v", sensor, events)
	return event.Event{}
}

type chReading struct {
	sensor string
	at     time.Time
}

// insertHistory writes history rows as the history writer does: a native batch
// with named columns, the only INSERT ClickHouse 18.16 accepts from clickhouse-go.
func insertHistory(t *testing.T, url string, readings []chReading, events []event.Event) {
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
	batch, err = conn.PrepareBatch(ctx, "INSERT INTO events (id, type, sensor_id, data, previous, at)")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if err := batch.Append(e.ID, string(e.Type), e.SensorID, nil, nil, e.At); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
}
