package storage_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// outboxFixture is a migrated store with one sensor per id and clients linked to
// them.
type outboxFixture struct {
	*storagetest.Fleet
	pg *storage.Postgres
	// reg is the registry on pg: the sensors, clients and members the
	// outbox's statements read.
	reg *registry.Store
	ctx context.Context
}

func newOutboxFixture(t *testing.T, sensors ...string) *outboxFixture {
	t.Helper()
	fleet := storagetest.NewFleet(t, sensors...)
	return &outboxFixture{Fleet: fleet, pg: fleet.Postgres, reg: fleet.Registry, ctx: fleet.Ctx}
}

func (f *outboxFixture) create(t *testing.T, events ...storage.NotificationInput) fanout.NotificationsCreated {
	t.Helper()
	created, err := fanout.NewPostgresStore(f.pg).CreateNotifications(f.ctx, events)
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// deliveries returns every delivery of the client, in creation order.
func (f *outboxFixture) deliveries(t *testing.T, clientID string) []storage.Delivery {
	t.Helper()
	ds, err := f.pg.ListClientDeliveries(f.ctx, clientID, storage.DeliveryFilter{}, storage.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func (f *outboxFixture) claim(t *testing.T, now time.Time, limit int) []storage.Delivery {
	t.Helper()
	ds, err := f.pg.ClaimDeliveries(f.ctx, now, limit, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func (f *outboxFixture) get(t *testing.T, id string) storage.Delivery {
	t.Helper()
	d, err := f.pg.GetDelivery(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var outboxT0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func stateChanged(id, sensor string, data int, at time.Time) storage.NotificationInput {
	prev := 1 - data
	return storage.NotificationInput{EventID: id, Type: "state_changed", SensorID: sensor, Data: &data, Previous: &prev, At: at}
}

// later is a claim time after everything the tests create is due.
func later() time.Time { return time.Now().Add(time.Minute) }

func TestClaimKeepsEventOrderPerClientAndSensor(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1", "s2")
	f.Client(t, registry.Client{Name: "c"}, "s1", "s2")
	f.create(t,
		storage.NotificationInput{EventID: "lost", Type: "connection_lost", SensorID: "s1", At: outboxT0},
		storage.NotificationInput{EventID: "restored", Type: "connection_restored", SensorID: "s1", At: outboxT0.Add(time.Second)},
		stateChanged("flip", "s1", 1, outboxT0.Add(2*time.Second)),
		stateChanged("other", "s2", 1, outboxT0.Add(3*time.Second)),
	)
	ids := func(ds []storage.Delivery) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.EventID)
		}
		sort.Strings(out)
		return out
	}
	first := f.claim(t, later(), 10)
	if got := ids(first); fmt.Sprint(got) != "[lost other]" {
		t.Fatalf("first claim = %v, want the oldest of each sensor", got)
	}
	for _, d := range first {
		if d.State != storage.DeliveryInFlight || d.Attempts != 1 || d.LeasedUntil.IsZero() {
			t.Fatalf("claimed delivery = %+v", d)
		}
	}
	if got := f.claim(t, later(), 10); len(got) != 0 {
		t.Fatalf("claimed %v while older deliveries are in flight", ids(got))
	}
	// "lost" fails retryably, due in an hour: it still holds back "restored".
	var lost storage.Delivery
	for _, d := range first {
		if d.EventID == "lost" {
			lost = d
		}
	}
	if _, err := storagetest.RescheduleDelivery(f.ctx, f.pg, lost.ID, lost.Attempts, later().Add(time.Hour), "503", 503); err != nil {
		t.Fatal(err)
	}
	if got := f.claim(t, later(), 10); len(got) != 0 {
		t.Fatalf("claimed %v behind a retrying delivery", ids(got))
	}
	// Due again: it goes first, then the next one once it is sent.
	retried := f.claim(t, later().Add(2*time.Hour), 10)
	if got := ids(retried); fmt.Sprint(got) != "[lost]" || retried[0].Attempts != 2 {
		t.Fatalf("claim after the back-off = %v (%+v), want lost on attempt 2", got, retried)
	}
	if err := storagetest.CompleteDelivery(f.ctx, f.pg, lost.ID, 2, 200); err != nil {
		t.Fatal(err)
	}
	if got := ids(f.claim(t, later(), 10)); fmt.Sprint(got) != "[restored]" {
		t.Fatalf("claim after the send = %v, want restored", got)
	}
	if got := f.get(t, lost.ID); got.State != storage.DeliverySent || got.LastHTTPStatus != 200 || !got.LeasedUntil.IsZero() {
		t.Fatalf("sent delivery = %+v", got)
	}
}

// A reading of a lost sensor yields a connection_restored and a state_changed with
// the same event time; they are delivered in the order they were fanned out in, which
// is their order on lockstream.events.
func TestClaimOrdersEventsOfTheSameTimeByArrival(t *testing.T) {
	t.Parallel()
	for _, order := range [][]string{{"restored", "flip"}, {"flip", "restored"}} {
		f := newOutboxFixture(t, "s1")
		f.Client(t, registry.Client{Name: "c"}, "s1")
		byID := map[string]storage.NotificationInput{
			"restored": {EventID: "restored", Type: "connection_restored", SensorID: "s1", At: outboxT0},
			"flip":     stateChanged("flip", "s1", 1, outboxT0),
		}
		f.create(t, byID[order[0]], byID[order[1]])
		for i, want := range order {
			got := f.claim(t, later(), 10)
			if len(got) != 1 || got[0].EventID != want {
				t.Fatalf("fanned out as %v: claim %d = %+v, want only %s", order, i, got, want)
			}
			if err := storagetest.CompleteDelivery(f.ctx, f.pg, got[0].ID, got[0].Attempts, 200); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestClaimConcurrentlyEachDeliveryOnce(t *testing.T) {
	t.Parallel()
	const sensors, perSensor = 20, 10
	var ids []string
	for i := range sensors {
		ids = append(ids, fmt.Sprintf("s%d", i))
	}
	f := newOutboxFixture(t, ids...)
	// Two clients per sensor: each (client, sensor) is its own ordered queue.
	f.Client(t, registry.Client{Name: "a"}, ids...)
	f.Client(t, registry.Client{Name: "b"}, ids...)
	var events []storage.NotificationInput
	for i, s := range ids {
		for j := range perSensor {
			events = append(events, storage.NotificationInput{EventID: fmt.Sprintf("e%d-%d", i, j),
				Type: "connection_lost", SensorID: s, At: outboxT0.Add(time.Duration(j) * time.Second)})
		}
	}
	total := f.create(t, events...).Deliveries[storage.ChannelWebhook]
	if total != 2*sensors*perSensor {
		t.Fatalf("created %d deliveries, want %d", total, 2*sensors*perSensor)
	}

	var (
		mu      sync.Mutex
		claims  = map[string]int{}
		lastSeq = map[string]time.Time{} // per (client, sensor): event times must rise
		errs    []error
		wg      sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 60*time.Second)
	defer cancel()
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				mu.Lock()
				done := len(claims) == total || len(errs) > 0
				mu.Unlock()
				if done {
					return
				}
				ds, err := f.pg.ClaimDeliveries(ctx, later(), 7, time.Minute)
				if err != nil {
					fail(err)
					return
				}
				var finishes []storage.DeliveryFinish
				mu.Lock()
				for _, d := range ds {
					claims[d.ID]++
					key := d.ClientID + "/" + d.SensorID
					if !lastSeq[key].IsZero() && !d.EventAt.After(lastSeq[key]) {
						errs = append(errs, fmt.Errorf("%s claimed out of order: %s after %s", key, d.EventAt, lastSeq[key]))
					}
					lastSeq[key] = d.EventAt
					finishes = append(finishes, storage.DeliveryFinish{ID: d.ID, Attempt: d.Attempts, State: storage.DeliverySent})
				}
				mu.Unlock()
				finished, err := f.pg.FinishDeliveries(ctx, finishes)
				if err != nil {
					fail(err)
					return
				}
				if len(finished) != len(finishes) {
					fail(fmt.Errorf("finished %d of %d", len(finished), len(finishes)))
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	if len(claims) != total {
		t.Fatalf("%d deliveries claimed, want %d", len(claims), total)
	}
	for id, n := range claims {
		if n != 1 {
			t.Errorf("delivery %s claimed %d times", id, n)
		}
	}
}

func TestLeaseExpiryAndFencing(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1")
	f.Client(t, registry.Client{Name: "c"}, "s1")
	f.create(t, storage.NotificationInput{EventID: "e", Type: "connection_lost", SensorID: "s1", At: outboxT0})
	now := later()
	claimed := f.claim(t, now, 10)
	if len(claimed) != 1 {
		t.Fatalf("claimed %d", len(claimed))
	}
	d := claimed[0]
	if !d.LeasedUntil.Equal(now.Add(time.Minute).Truncate(time.Microsecond)) {
		t.Fatalf("leased until %s, want %s", d.LeasedUntil, now.Add(time.Minute))
	}
	if got, err := f.pg.RequeueExpiredLeases(f.ctx, now.Add(30*time.Second)); err != nil || len(got) != 0 {
		t.Fatalf("requeue within the lease: %+v, %v", got, err)
	}
	got, err := f.pg.RequeueExpiredLeases(f.ctx, now.Add(2*time.Minute))
	if err != nil || len(got) != 1 || got[0].ID != d.ID || got[0].State != storage.DeliveryPending || got[0].Channel != storage.ChannelWebhook {
		t.Fatalf("requeue after the lease: %+v, %v", got, err)
	}
	if got := f.get(t, d.ID); got.State != storage.DeliveryPending || !got.LeasedUntil.IsZero() || got.Attempts != 1 {
		t.Fatalf("requeued delivery = %+v", got)
	}
	// Another retrier claims it (attempt 2); the first one's late result is fenced off.
	again := f.claim(t, now.Add(2*time.Minute), 10)
	if len(again) != 1 || again[0].Attempts != 2 {
		t.Fatalf("reclaim = %+v", again)
	}
	if err := storagetest.CompleteDelivery(f.ctx, f.pg, d.ID, 1, 200); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("late finish of attempt 1: err = %v, want ErrConflict", err)
	}
	if err := storagetest.FailDelivery(f.ctx, f.pg, d.ID, 2, "400 Bad Request", 400); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, d.ID); got.State != storage.DeliveryFailed || got.LastHTTPStatus != 400 || got.LastError != "400 Bad Request" {
		t.Fatalf("failed delivery = %+v", got)
	}
}

func TestRetryDelivery(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1")
	f.Client(t, registry.Client{Name: "c"}, "s1")
	f.create(t, storage.NotificationInput{EventID: "e1", Type: "connection_lost", SensorID: "s1", At: outboxT0},
		storage.NotificationInput{EventID: "e2", Type: "connection_restored", SensorID: "s1", At: outboxT0.Add(time.Second)})
	d := f.claim(t, later(), 1)[0]
	state, err := storagetest.GiveUpDelivery(f.ctx, f.pg, d.ID, d.Attempts, "sink down", 0)
	if err != nil || state != storage.DeliveryGivenUp {
		t.Fatalf("give up: %s, %v", state, err)
	}
	retried, err := f.pg.RetryDelivery(f.ctx, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if retried.State != storage.DeliveryPending || retried.Attempts != 0 {
		t.Fatalf("retried delivery = %+v", retried)
	}
	if _, err := f.pg.RetryDelivery(f.ctx, d.ID); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("retry of a PENDING delivery: err = %v, want ErrConflict", err)
	}
	if _, err := f.pg.RetryDelivery(f.ctx, "0190f4a0-0000-7000-8000-000000000000"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("retry of a missing delivery: err = %v, want ErrNotFound", err)
	}
	if _, err := f.pg.RetryDelivery(f.ctx, "nope"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("retry of a malformed id: err = %v, want ErrNotFound", err)
	}
}

func TestDeliveryTargetRereadsTheClient(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1")
	c := f.Client(t, registry.Client{Name: "c", WebhookURL: "https://old.example/hook", Email: "c@example.com",
		PushTargets: []storage.PushTarget{{Platform: storage.PlatformIOS, PushKey: "k1"}}}, "s1")
	f.create(t, stateChanged("e1", "s1", 1, outboxT0))
	byChannel := map[storage.Channel]storage.Delivery{}
	for _, d := range f.deliveries(t, c.ID) {
		byChannel[d.Channel] = d
	}
	target := func(ch storage.Channel) storage.DeliveryTarget {
		t.Helper()
		tg, err := f.pg.DeliveryTarget(f.ctx, byChannel[ch].ID)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	got := target(storage.ChannelWebhook)
	if !got.Owned || !got.ClientExists || got.WebhookURL != "https://old.example/hook" || got.Secret != "whsec_c2VjcmV0" ||
		got.Email != "c@example.com" || got.SensorAddress != "addr of s1" {
		t.Fatalf("target = %+v", got)
	}
	if !target(storage.ChannelSwrve).PushTargetExists {
		t.Fatal("push target of a registered device reported missing")
	}

	newURL, noEmail := "https://new.example/hook", ""
	if _, err := f.reg.UpdateClient(f.ctx, c.ID, registry.ClientUpdate{WebhookURL: &newURL, Email: &noEmail,
		PushTargets: &[]storage.PushTarget{}}); err != nil {
		t.Fatal(err)
	}
	if got := target(storage.ChannelWebhook); got.WebhookURL != newURL || got.Email != "" || !got.Owned {
		t.Fatalf("target after update = %+v", got)
	}
	if target(storage.ChannelSwrve).PushTargetExists {
		t.Fatal("removed push target reported present")
	}
	if err := f.reg.UnlinkSensor(f.ctx, c.ID, "s1"); err != nil {
		t.Fatal(err)
	}
	if got := target(storage.ChannelWebhook); got.Owned || !got.ClientExists {
		t.Fatalf("target after unlink = %+v, want not owned", got)
	}
	if err := f.reg.DeleteClient(f.ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if got := target(storage.ChannelWebhook); got.Owned || got.ClientExists {
		t.Fatalf("target after delete = %+v", got)
	}
	if _, err := f.pg.DeliveryTarget(f.ctx, "0190f4a0-0000-7000-8000-000000000000"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("target of a missing delivery: err = %v", err)
	}
}

func TestListClientDeliveriesAndOutboxStats(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1", "s2", "s3")
	c := f.Client(t, registry.Client{Name: "c"}, "s1", "s2", "s3")
	f.create(t,
		storage.NotificationInput{EventID: "e1", Type: "connection_lost", SensorID: "s1", At: outboxT0},
		storage.NotificationInput{EventID: "e2", Type: "connection_lost", SensorID: "s2", At: outboxT0.Add(time.Hour)},
		storage.NotificationInput{EventID: "e3", Type: "connection_lost", SensorID: "s3", At: outboxT0.Add(2 * time.Hour)},
	)
	now := later()
	claimed := f.claim(t, now, 1)
	if err := storagetest.CompleteDelivery(f.ctx, f.pg, claimed[0].ID, 1, 204); err != nil {
		t.Fatal(err)
	}
	f.claim(t, now, 1) // stays IN_FLIGHT

	list := func(filter storage.DeliveryFilter, page storage.Page) []string {
		t.Helper()
		ds, err := f.pg.ListClientDeliveries(f.ctx, c.ID, filter, page)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range ds {
			out = append(out, d.EventID)
		}
		sort.Strings(out)
		return out
	}
	if got := list(storage.DeliveryFilter{State: storage.DeliverySent}, storage.Page{Limit: 10}); len(got) != 1 {
		t.Fatalf("sent deliveries = %v", got)
	}
	if got := list(storage.DeliveryFilter{From: outboxT0.Add(time.Minute), To: outboxT0.Add(2 * time.Hour)}, storage.Page{Limit: 10}); fmt.Sprint(got) != "[e2]" {
		t.Fatalf("deliveries in [T0+1m, T0+2h) = %v, want [e2]", got)
	}
	first, err := f.pg.ListClientDeliveries(f.ctx, c.ID, storage.DeliveryFilter{}, storage.Page{Limit: 2})
	if err != nil || len(first) != 2 {
		t.Fatalf("first page: %d, %v", len(first), err)
	}
	rest, err := f.pg.ListClientDeliveries(f.ctx, c.ID, storage.DeliveryFilter{}, storage.Page{After: first[1].ID, Limit: 2})
	if err != nil || len(rest) != 1 || rest[0].ID == first[0].ID || rest[0].ID == first[1].ID {
		t.Fatalf("second page: %+v, %v", rest, err)
	}
	if _, err := f.pg.ListClientDeliveries(f.ctx, "0190f4a0-0000-7000-8000-000000000000", storage.DeliveryFilter{}, storage.Page{Limit: 1}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("deliveries of a missing client: err = %v", err)
	}

	stats, err := f.pg.OutboxStats(f.ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	want := map[storage.DeliveryState]int64{storage.DeliveryScheduled: 0, storage.DeliveryPending: 1,
		storage.DeliveryRetry: 0, storage.DeliveryInFlight: 1}
	if fmt.Sprint(stats.Depth) != fmt.Sprint(want) {
		t.Fatalf("depth = %v, want %v", stats.Depth, want)
	}
	pending := list(storage.DeliveryFilter{State: storage.DeliveryPending}, storage.Page{Limit: 10})
	if len(pending) != 1 {
		t.Fatalf("pending = %v", pending)
	}
	if stats.OldestDue.IsZero() || stats.OldestDue.After(now) {
		t.Fatalf("oldest due = %s, want a time before %s", stats.OldestDue, now)
	}
	if stats, err := f.pg.OutboxStats(f.ctx, time.Unix(0, 0)); err != nil || !stats.OldestDue.IsZero() {
		t.Fatalf("nothing is due in 1970: %+v, %v", stats, err)
	}
}

func TestDeliveryAttemptsRoundTrip(t *testing.T) {
	t.Parallel()
	ch := storagetest.New(t).ClickHouse
	ctx := context.Background()
	attempts := []storage.DeliveryAttempt{
		{ID: 1, DeliveryID: "d1", ClientID: "c1", SensorID: "s1", EventID: "e1", Channel: storage.ChannelWebhook, Attempt: 1,
			Status: storage.DeliveryRetry, HTTPStatus: 503, ErrorType: "HTTP_STATUS", Error: "503 Service Unavailable",
			Duration: 1500 * time.Millisecond, At: outboxT0},
		{ID: 2, DeliveryID: "d1", ClientID: "c1", SensorID: "s1", EventID: "e1", Channel: storage.ChannelSwrve, Attempt: 2,
			Status: storage.DeliverySent, HTTPStatus: 200, AnswerCode: 200, AnswerMessage: "OK",
			Duration: 20 * time.Millisecond, At: outboxT0.Add(time.Minute)},
		{ID: 3, DeliveryID: "d2", Channel: storage.ChannelEmail, Attempt: 1, Status: storage.DeliverySent, At: outboxT0},
	}
	// The first two twice: a batch copied again after a crash reads once.
	if err := ch.InsertDeliveryAttempts(ctx, append(attempts, attempts[:2]...)); err != nil {
		t.Fatal(err)
	}
	got, err := ch.DeliveryAttempts(ctx, "d1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("read %d attempts of d1, want 2", len(got))
	}
	for i, a := range got {
		want := attempts[i]
		if a.DeliveryID != want.DeliveryID || a.ClientID != want.ClientID || a.SensorID != want.SensorID ||
			a.EventID != want.EventID || a.Channel != want.Channel || a.Attempt != want.Attempt || a.Status != want.Status ||
			a.HTTPStatus != want.HTTPStatus || a.ErrorType != want.ErrorType || a.Error != want.Error ||
			a.AnswerCode != want.AnswerCode || a.AnswerMessage != want.AnswerMessage ||
			a.Duration != want.Duration || !a.At.Equal(want.At) {
			t.Errorf("attempt %d = %+v, want %+v", i, a, want)
		}
	}
}

func TestRequeueSupersedesAnOlderStateWithANewerWaiting(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1")
	f.Client(t, registry.Client{Name: "c"}, "s1")
	f.create(t, stateChanged("old", "s1", 1, outboxT0))
	now := later()
	claimed := f.claim(t, now, 10)
	if len(claimed) != 1 {
		t.Fatalf("claimed %d", len(claimed))
	}
	// The newer flip arrives while the old one is in flight: it is left alone...
	f.create(t, stateChanged("new", "s1", 0, outboxT0.Add(time.Second)))
	if got := f.get(t, claimed[0].ID); got.State != storage.DeliveryInFlight {
		t.Fatalf("in-flight delivery became %s", got.State)
	}
	// ...until its retrier dies: then it is moot.
	got, err := f.pg.RequeueExpiredLeases(f.ctx, now.Add(time.Hour))
	if err != nil || len(got) != 1 || got[0].State != storage.DeliverySuperseded {
		t.Fatalf("requeue = %+v, %v; want the old flip SUPERSEDED", got, err)
	}
	next := f.claim(t, now.Add(time.Hour), 10)
	if len(next) != 1 || next[0].EventID != "new" {
		t.Fatalf("claim after the requeue = %+v, want the new flip", next)
	}
}
