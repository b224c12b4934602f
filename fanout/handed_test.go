package fanout_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// rowsOf counts the delivery rows and the rows in flight of a delivery id.
func (f *outboxFixture) rowsOf(t *testing.T, id string) (deliveries, inFlight int) {
	t.Helper()
	err := f.pg.Pool().QueryRow(f.ctx, `
		SELECT (SELECT count(*) FROM deliveries WHERE id = $1), (SELECT count(*) FROM webhooks_in_flight WHERE id = $1)`,
		id).Scan(&deliveries, &inFlight)
	if err != nil {
		t.Fatal(err)
	}
	return deliveries, inFlight
}

// attempts returns the logged attempts of a delivery.
func (f *outboxFixture) attempts(t *testing.T, id string) []storage.DeliveryAttempt {
	t.Helper()
	as, err := f.pg.DeliveryAttempts(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

func (f *outboxFixture) finish(t *testing.T, fin ...storage.DeliveryFinish) map[string]storage.FinishedDelivery {
	t.Helper()
	done, err := f.pg.FinishDeliveries(f.ctx, fin)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]storage.FinishedDelivery{}
	for _, d := range done {
		out[d.ID] = d
	}
	return out
}

// A handed-over webhook whose first attempt succeeds leaves no delivery row,
// only its attempt, yet reads as SENT; one whose attempt fails becomes a
// delivery in the state the attempt left it; and while one is in flight, the
// claim holds back a newer webhook of its key, which its outcome frees.
func TestHandedOverWebhookLeavesARowOnlyWhenItFails(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1", "s2")
	a := f.Client(t, registry.Client{Name: "a"}, "s1", "s2")
	got := f.claimTx(t, 10, stateChanged("e1", "s1", 1, outboxT0), stateChanged("e2", "s2", 1, outboxT0))
	if len(got.Claimed) != 2 {
		t.Fatalf("claimed %+v, want e1's and e2's webhooks", got.Claimed)
	}
	e1, e2 := got.Claimed[0], got.Claimed[1]
	// A newer change of s1 while e1 is in flight: PENDING, and not claimed.
	f.create(t, connectionLost("e3", "s1", outboxT0.Add(time.Second)))
	if claimed := f.claim(t, outboxT0.Add(time.Hour), 10); len(claimed) != 0 {
		t.Fatalf("claimed %+v while an older webhook of s1 is in flight, want nothing", claimed)
	}

	done := f.finish(t,
		storage.DeliveryFinish{ID: e1.ID, Attempt: 1, State: storage.DeliverySent, HTTPStatus: 200, At: outboxT0},
		storage.DeliveryFinish{ID: e2.ID, Attempt: 1, State: storage.DeliveryRetry, HTTPStatus: 503, Error: "503",
			ErrorType: "HTTP_STATUS", NextAttemptAt: outboxT0.Add(time.Minute), At: outboxT0})
	if d := done[e1.ID]; d.State != storage.DeliverySent || !d.Frees {
		t.Fatalf("e1 finished %+v, want SENT and freeing e3", d)
	}
	if d := done[e2.ID]; d.State != storage.DeliveryRetry || d.Frees {
		t.Fatalf("e2 finished %+v, want RETRY", d)
	}
	if rows, inFlight := f.rowsOf(t, e1.ID); rows != 0 || inFlight != 0 {
		t.Fatalf("sent e1: %d delivery rows, %d in flight; want none", rows, inFlight)
	}
	if as := f.attempts(t, e1.ID); len(as) != 1 || as[0].Status != storage.DeliverySent || as[0].EventID != "e1" ||
		as[0].ClientID != a.ID || as[0].SensorID != "s1" || as[0].Attempt != 1 {
		t.Fatalf("e1's attempts = %+v, want its one SENT attempt", as)
	}
	if d, err := f.pg.GetDelivery(f.ctx, e1.ID); err != nil || d.State != storage.DeliverySent || d.Attempts != 1 ||
		d.EventID != "e1" || d.Seq != e1.Seq || d.ClientID != a.ID {
		t.Fatalf("GetDelivery(e1) = %+v, %v; want SENT from its attempt", d, err)
	}
	if _, err := f.pg.RetryDelivery(f.ctx, e1.ID); !errors.Is(err, storage.ErrConflict) {
		t.Fatalf("retrying the sent e1 = %v, want a conflict", err)
	}
	sent, err := f.pg.ListClientDeliveries(f.ctx, a.ID, storage.DeliveryFilter{State: storage.DeliverySent}, storage.Page{Limit: 10})
	if err != nil || len(sent) != 1 || sent[0].ID != e1.ID {
		t.Fatalf("SENT deliveries of a = %+v, %v; want e1's", sent, err)
	}
	if rows, inFlight := f.rowsOf(t, e2.ID); rows != 1 || inFlight != 0 {
		t.Fatalf("failed e2: %d delivery rows, %d in flight; want its row", rows, inFlight)
	}
	if d, err := f.pg.GetDelivery(f.ctx, e2.ID); err != nil || d.State != storage.DeliveryRetry || d.Attempts != 1 ||
		d.LastHTTPStatus != 503 || !d.NextAttemptAt.Equal(outboxT0.Add(time.Minute)) {
		t.Fatalf("GetDelivery(e2) = %+v, %v; want RETRY after its first attempt", d, err)
	}
	// e1 done: e3 is claimed now.
	claimed := map[string]bool{}
	for _, d := range f.claim(t, time.Now().Add(time.Hour), 10) {
		claimed[d.EventID] = true
	}
	if !claimed["e3"] || !claimed["e2"] || len(claimed) != 2 {
		t.Fatalf("claimed %v, want e3's webhook and e2's retry", claimed)
	}
}

// A handed-over webhook whose sender died is put back by the lease sweep as a
// PENDING delivery with its attempt logged LEASE_EXPIRED; the dead sender's
// late outcome, once the delivery moved on, is logged but not recorded.
func TestExpiredHandedOverWebhookBecomesAPendingDelivery(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1")
	f.Client(t, registry.Client{Name: "a"}, "s1")
	got, err := f.store.CreateNotificationsClaiming(f.ctx, []storage.NotificationInput{stateChanged("e1", "s1", 1, outboxT0)},
		fanout.Claim{Max: 1, LeasedUntil: time.Now().Add(-time.Second)})
	if err != nil || len(got.Claimed) != 1 {
		t.Fatalf("claimed %+v, %v", got.Claimed, err)
	}
	id := got.Claimed[0].ID
	requeued, err := f.pg.RequeueExpiredLeases(f.ctx, time.Now())
	if err != nil || len(requeued) != 1 || requeued[0].ID != id || requeued[0].State != storage.DeliveryPending {
		t.Fatalf("requeued %+v, %v; want e1's webhook PENDING", requeued, err)
	}
	if rows, inFlight := f.rowsOf(t, id); rows != 1 || inFlight != 0 {
		t.Fatalf("expired e1: %d delivery rows, %d in flight; want its row", rows, inFlight)
	}
	as := f.attempts(t, id)
	if len(as) != 1 || as[0].ErrorType != storage.ErrorTypeLeaseExpired || as[0].Status != storage.DeliveryPending || as[0].EventID != "e1" {
		t.Fatalf("attempts = %+v, want one LEASE_EXPIRED", as)
	}
	// Another retrier claims it (attempt 2); the dead one's outcome is fenced.
	if claimed := f.claim(t, time.Now().Add(time.Second), 10); len(claimed) != 1 || claimed[0].ID != id || claimed[0].Attempts != 2 {
		t.Fatalf("claimed %+v, want e1's webhook on attempt 2", claimed)
	}
	if done := f.finish(t, storage.DeliveryFinish{ID: id, Attempt: 1, State: storage.DeliverySent, At: time.Now()}); len(done) != 0 {
		t.Fatalf("late outcome recorded: %+v", done)
	}
	if as := f.attempts(t, id); len(as) != 2 || as[1].Recorded || as[1].Status != storage.DeliverySent {
		t.Fatalf("attempts = %+v, want the late one logged, not recorded", as)
	}
	if d, err := f.pg.GetDelivery(f.ctx, id); err != nil || d.State != storage.DeliveryInFlight || d.Attempts != 2 {
		t.Fatalf("GetDelivery = %+v, %v; want IN_FLIGHT on attempt 2", d, err)
	}
}
