package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

func connectionLost(id, sensor string, at time.Time) storage.NotificationInput {
	return storage.NotificationInput{EventID: id, Type: "connection_lost", SensorID: sensor, At: at}
}

// fail records n failed webhook attempts of the client, from at on, one second
// apart.
func fail(t *testing.T, f *outboxFixture, clientID string, n int, at time.Time) {
	t.Helper()
	var outcomes []storage.WebhookOutcome
	for i := range n {
		outcomes = append(outcomes, storage.WebhookOutcome{ClientID: clientID, At: at.Add(time.Duration(i) * time.Second)})
	}
	if _, err := f.pg.RecordWebhookHealth(f.ctx, outcomes, 0); err != nil {
		t.Fatal(err)
	}
}

// An endpoint is disabled once every attempt failed for the window with enough
// failures: its open webhook deliveries become PAUSED (email ones go on), new
// ones are created PAUSED, one endpoint_disabled event waits to be mailed
// (once); enabling resumes them in event order.
func TestEndpointDisableAndEnable(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "deadA", "deadB")
	dead := f.Client(t, registry.Client{Name: "dead", Email: "owner@example.com"}, "deadA", "deadB")
	now := time.Now()
	f.create(t, connectionLost("l1", "deadA", outboxT0), connectionLost("l2", "deadB", outboxT0.Add(time.Second)))

	// A success resets the failing period; failures after it start a new one.
	fail(t, f, dead.ID, 3, now.Add(-time.Hour))
	if _, err := f.pg.RecordWebhookHealth(f.ctx, []storage.WebhookOutcome{{ClientID: dead.ID, OK: true, At: now.Add(-50 * time.Minute)}}, 0); err != nil {
		t.Fatal(err)
	}
	fail(t, f, dead.ID, 2, now.Add(-40*time.Minute))
	c, err := f.reg.GetClient(f.ctx, dead.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c.WebhookFailures != 2 || !c.WebhookFailingSince.Equal(now.Add(-40*time.Minute).Truncate(time.Microsecond)) {
		t.Fatalf("after a success and 2 failures: failing since %v with %d failures", c.WebhookFailingSince, c.WebhookFailures)
	}
	// Too few failures, then too short a period: not disabled.
	if sweep := disable(t, f, now, 30*time.Minute, 3); len(sweep.Disabled) != 0 {
		t.Fatalf("2 failures disabled the endpoint: %+v", sweep)
	}
	if sweep := disable(t, f, now, 50*time.Minute, 2); len(sweep.Disabled) != 0 {
		t.Fatalf("40 minutes of failures disabled an endpoint at 50: %+v", sweep)
	}
	sweep := disable(t, f, now, 30*time.Minute, 2)
	if len(sweep.Disabled) != 1 || sweep.Disabled[0].ClientID != dead.ID || sweep.Paused != 2 {
		t.Fatalf("sweep %+v, want the endpoint disabled and its 2 webhook deliveries paused", sweep)
	}
	if again := disable(t, f, now, 30*time.Minute, 2); len(again.Disabled) != 0 {
		t.Fatalf("a second sweep disabled again: %+v", again)
	}
	f.create(t, connectionLost("l3", "deadA", outboxT0.Add(2*time.Second)))
	states := map[string]int{}
	for _, d := range f.deliveries(t, dead.ID) {
		states[string(d.Channel)+":"+string(d.State)]++
	}
	if states["webhook:PAUSED"] != 3 || states["email:PENDING"] != 3 {
		t.Fatalf("deliveries by channel and state: %v, want 3 webhook PAUSED and 3 email PENDING", states)
	}

	// One notice, mailed once.
	var mailed []storage.EndpointNotice
	send := func(_ context.Context, n storage.EndpointNotice) storage.NoticeResult {
		mailed = append(mailed, n)
		return storage.NoticeResult{Done: true}
	}
	for range 2 {
		if _, err := f.pg.MailEndpointNotices(f.ctx, 10, send); err != nil {
			t.Fatal(err)
		}
	}
	if len(mailed) != 1 || mailed[0].Email != "owner@example.com" || mailed[0].ClientID != dead.ID {
		t.Fatalf("notices mailed: %+v, want one to owner@example.com", mailed)
	}

	resumed, err := f.pg.EnableEndpoint(f.ctx, dead.ID)
	if err != nil || resumed != 3 {
		t.Fatalf("enable: %d resumed, %v; want 3", resumed, err)
	}
	claimed := f.claim(t, later(), 10)
	var order []string
	for _, d := range claimed {
		if d.Channel == storage.ChannelWebhook {
			order = append(order, d.EventID)
		}
	}
	if len(order) != 1 || order[0] != "l1" {
		// l2 and l3 wait behind l1: kept deliveries go out in event order.
		t.Errorf("webhooks claimed after enabling: %v, want l1 alone (l2, l3 after it)", order)
	}
	events, err := f.pg.EndpointEvents(f.ctx, dead.ID, 10)
	if err != nil || len(events) != 2 || events[0].Type != storage.EndpointEnabledEvent || events[1].Type != storage.EndpointDisabledEvent {
		t.Fatalf("endpoint events %+v, %v; want enabled after disabled", events, err)
	}
}

func disable(t *testing.T, f *outboxFixture, now time.Time, window time.Duration, minFailures int) storage.EndpointSweep {
	t.Helper()
	sweep, err := f.pg.DisableFailingEndpoints(f.ctx, now, window, minFailures)
	if err != nil {
		t.Fatal(err)
	}
	return sweep
}

// Recover requeues the client's FAILED and GIVEN_UP deliveries since the time,
// oldest event first, leaves SUPERSEDED ones alone, supersedes a state older
// than one already delivered, and touches no other client.
func TestRecoverDeliveries(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "recA", "recB", "recC")
	c := f.Client(t, registry.Client{Name: "rec"}, "recA", "recB", "recC")
	other := f.Client(t, registry.Client{Name: "other"}, "recA")
	f.create(t,
		connectionLost("r1", "recA", outboxT0),
		stateChanged("r2", "recB", 1, outboxT0.Add(time.Second)),
		stateChanged("r3", "recC", 1, outboxT0.Add(2*time.Second)),
		stateChanged("r4", "recC", 0, outboxT0.Add(3*time.Second)),
	)
	// Every delivery of both clients fails for good, but r4's, which is sent;
	// r3 is SUPERSEDED by r4 at the fan-out already.
	byEvent := map[string]storage.Delivery{}
	for _, d := range f.claim(t, later(), 100) {
		state := storage.DeliveryGivenUp
		if d.EventID == "r4" {
			state = storage.DeliverySent
		}
		if _, err := f.pg.FinishDeliveries(f.ctx, []storage.DeliveryFinish{{ID: d.ID, Attempt: d.Attempts, State: state}}); err != nil {
			t.Fatal(err)
		}
		if d.ClientID == c.ID {
			byEvent[d.EventID] = d
		}
	}
	res, err := f.pg.RecoverDeliveries(f.ctx, c.ID, outboxT0.Add(-time.Hour), []storage.DeliveryState{storage.DeliveryFailed, storage.DeliveryGivenUp})
	if err != nil {
		t.Fatal(err)
	}
	if res.Recovered != 2 || res.Superseded != 0 {
		t.Fatalf("recover: %+v, want r1 and r2 recovered", res)
	}
	for id, want := range map[string]storage.DeliveryState{"r1": storage.DeliveryPending, "r2": storage.DeliveryPending,
		"r3": storage.DeliverySuperseded, "r4": storage.DeliverySent} {
		d, ok := byEvent[id]
		if !ok {
			if id == "r3" {
				continue // superseded before any claim
			}
			t.Fatalf("no delivery of %s claimed", id)
		}
		if got := f.get(t, d.ID); got.State != want || (want == storage.DeliveryPending && got.Attempts != 0) {
			t.Errorf("%s: %s after %d attempts, want %s", id, got.State, got.Attempts, want)
		}
	}
	claimed := f.claim(t, later(), 10)
	if len(claimed) != 2 || claimed[0].EventID != "r1" || claimed[1].EventID != "r2" {
		t.Fatalf("claimed after recover: %d, want r1 then r2", len(claimed))
	}
	giveUp(t, f, claimed)
	for _, d := range f.deliveries(t, other.ID) {
		if d.State != storage.DeliveryGivenUp {
			t.Errorf("the other client's delivery is %s, want GIVEN_UP", d.State)
		}
	}
	// A newer non-superseded state makes an older given-up one stale.
	f.create(t, stateChanged("r5", "recB", 0, outboxT0.Add(4*time.Second)))
	giveUp(t, f, f.claim(t, later(), 100))
	res, err = f.pg.RecoverDeliveries(f.ctx, c.ID, outboxT0.Add(-time.Hour), []storage.DeliveryState{storage.DeliveryGivenUp})
	if err != nil {
		t.Fatal(err)
	}
	if res.Recovered != 2 || res.Superseded != 1 {
		t.Errorf("second recover: %+v, want r1 and r5 recovered, r2 superseded", res)
	}
}

// The limiter spaces one endpoint's starts window/rate apart across callers,
// spreads the waits of those it holds back, leaves unlimited endpoints alone
// but for a 429's block.
func TestAdmitWebhooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, err := storage.OpenRedis(ctx, storagetest.RedisURL(t), storagetest.NewRedisPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	const window = time.Second
	reqs := []storage.WebhookAdmission{{ClientID: "a", Rate: 5}, {ClientID: "a", Rate: 5}, {ClientID: "b"}, {ClientID: "a", Rate: 5}}
	waits, err := r.AdmitWebhooks(ctx, reqs, window)
	if err != nil {
		t.Fatal(err)
	}
	interval := window / 5
	if waits[0] != 0 || waits[2] != 0 {
		t.Fatalf("waits %v: the first of a and the unlimited b start at once", waits)
	}
	if waits[1] <= interval-50*time.Millisecond || waits[1] > interval || waits[3] <= waits[1]+interval-time.Millisecond {
		t.Fatalf("waits %v: a's second waits about %v, its third one interval more", waits, interval)
	}
	// Another retrier asking at once is held back too.
	again, err := r.AdmitWebhooks(ctx, reqs[:1], window)
	if err != nil || again[0] == 0 {
		t.Fatalf("a second caller: %v, %v; want a wait", again, err)
	}
	if err := r.BlockWebhooks(ctx, "b", time.Minute); err != nil {
		t.Fatal(err)
	}
	blocked, err := r.AdmitWebhooks(ctx, []storage.WebhookAdmission{{ClientID: "b"}, {ClientID: "c"}}, window)
	if err != nil || blocked[0] < 59*time.Second || blocked[1] != 0 {
		t.Fatalf("after a 429 of b: %v, %v; b waits about a minute, c not at all", blocked, err)
	}
}

func giveUp(t *testing.T, f *outboxFixture, ds []storage.Delivery) {
	t.Helper()
	for _, d := range ds {
		if _, err := f.pg.FinishDeliveries(f.ctx, []storage.DeliveryFinish{{ID: d.ID, Attempt: d.Attempts, State: storage.DeliveryGivenUp}}); err != nil {
			t.Fatal(err)
		}
	}
}
