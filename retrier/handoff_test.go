package retrier_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
)

// handOver creates a state change with the retrier's reserved workers, as the
// fan-out of its process does, and returns the deliveries created claimed.
func handOver(t *testing.T, b *bundle, r *retrier.Retrier, eventID string, reserved int, leasedUntil time.Time) fanout.NotificationsCreated {
	t.Helper()
	data, prev := 1, 0
	created, err := fanout.NewPostgresStore(b.pg).CreateNotificationsClaiming(b.ctx, []storage.NotificationInput{{
		EventID: eventID, Type: "state_changed", SensorID: sensorID, Data: &data, Previous: &prev, At: time.Now(),
	}}, fanout.Claim{Max: reserved, LeasedUntil: leasedUntil})
	if err != nil {
		t.Fatal(err)
	}
	r.Release(reserved - len(created.Claimed))
	return created
}

// reserve waits until the running retrier reserves a worker.
func reserve(t *testing.T, r *retrier.Retrier) (int, time.Time) {
	t.Helper()
	var n int
	var until time.Time
	waitFor(t, "the retrier to reserve a worker", func() bool {
		n, until = r.Reserve(1)
		return n == 1
	})
	return n, until
}

// TestHandoffSendsWithoutAClaim: a delivery the fan-out created claimed and
// handed over is sent and recorded by a retrier that never polls and has no
// listener: no claim brought it.
func TestHandoffSendsWithoutAClaim(t *testing.T) {
	t.Parallel()
	s := newSink(t, http.StatusNoContent)
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	r := b.newRetrier(retrier.Config{FallbackPollInterval: time.Hour}, b.reg)
	b.run(r)
	// The claim loop polls every 5ms (testConfig), but the delivery is
	// IN_FLIGHT from its commit: no claim can take it.
	n, until := reserve(t, r)
	created := handOver(t, b, r, "handed-1", n, until)
	claimed := created.Claimed
	if len(claimed) != 1 {
		t.Fatalf("created %d claimed, want 1", len(claimed))
	}
	if tg := created.ClaimedTargets[claimed[0].ID]; !tg.Owned || tg.Secret != b.client.Secret || tg.WebhookURL != s.srv.URL {
		t.Fatalf("handed-over target = %+v", tg)
	}
	r.Deliver(claimed, created.ClaimedTargets)
	d := b.waitState(claimed[0].ID, storage.DeliverySent, 1)
	if s.count() != 1 {
		t.Fatalf("sink got %d webhooks, want 1", s.count())
	}
	req := s.requests()[0]
	if err := webhook.Verify(b.client.Secret, req.header, req.raw, 0); err != nil {
		t.Fatal(err)
	}
	if req.body.Seq != claimed[0].Seq || req.body.Seq < 1 {
		t.Fatalf("webhook seq %d, want the notification's %d", req.body.Seq, claimed[0].Seq)
	}
	if got := b.attempts(d.ID, 1); got[0].Status != storage.DeliverySent {
		t.Fatalf("attempt = %+v, want SENT", got[0])
	}
	if got := metricValue(t, b, "lockstream_deliveries_handed_over_total"); got != 1 {
		t.Fatalf("handed over %v, want 1", got)
	}
}

// TestHandoffAfterStopGivesBack: a delivery handed over after the retrier
// stopped (its reservation outlived DrainTimeout) is not sent but put back,
// its attempt given back, due at once for any retrier.
func TestHandoffAfterStopGivesBack(t *testing.T) {
	t.Parallel()
	s := newSink(t, http.StatusNoContent)
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	r := b.newRetrier(retrier.Config{DrainTimeout: 10 * time.Millisecond}, b.reg)
	cancel, stopped := b.run(r)
	n, until := reserve(t, r)
	cancel()
	<-stopped
	if again, _ := r.Reserve(1); again != 0 {
		t.Fatalf("a stopped retrier reserved %d workers", again)
	}
	created := handOver(t, b, r, "late-1", n, until)
	claimed := created.Claimed
	if len(claimed) != 1 {
		t.Fatalf("created %d claimed, want 1", len(claimed))
	}
	r.Deliver(claimed, created.ClaimedTargets)
	d := b.get(claimed[0].ID)
	if d.State != storage.DeliveryRetry || d.Attempts != 0 || d.NextAttemptAt.After(time.Now()) {
		t.Fatalf("given back = %+v, want RETRY due now with no attempt", d)
	}
	if s.count() != 0 {
		t.Fatalf("sink got %d webhooks from a stopped retrier", s.count())
	}
}

// TestHandoffBacklogWaitsForASender: the hand-over takes up to
// HandoffBacklog times the lane's workers beyond its free ones; those wait in
// memory for a sender, so
// the sink never has more than Workers attempts at once, and every one is
// sent and recorded once a sender frees, with no delivery row.
func TestHandoffBacklogWaitsForASender(t *testing.T) {
	t.Parallel()
	// A sink that counts the attempts it holds at once, and holds every one
	// until hold closes.
	hold := make(chan struct{})
	var inFlight, most, got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := inFlight.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		got.Add(1)
		<-hold
		inFlight.Add(-1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	b := setup(t, setupOpts{sinkURL: srv.URL, noRetrier: true})
	const workers = 2
	places := workers * (1 + retrier.HandoffBacklog)
	r := b.newRetrier(retrier.Config{Workers: workers, FallbackPollInterval: time.Hour,
		AttemptTimeout: time.Minute, Lease: 5 * time.Minute}, b.reg)
	b.run(r)
	sensors := make([]string, places)
	for i := range sensors {
		sensors[i] = fmt.Sprintf("Backlog%d", i)
		if _, err := b.registry.CreateSensor(b.ctx, registry.Sensor{ID: sensors[i], Address: "a"}); err != nil {
			t.Fatal(err)
		}
		if err := b.registry.LinkSensor(b.ctx, b.client.ID, sensors[i]); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	var until time.Time
	waitFor(t, "the retrier to reserve its workers and backlog", func() bool {
		n, until = r.Reserve(100)
		if n > 0 && n < places {
			r.Release(n)
		}
		return n == places
	})
	if again, _ := r.Reserve(1); again != 0 {
		t.Fatalf("reserved %d more beyond Workers + HandoffBacklog×Workers", again)
	}
	data, prev := 1, 0
	events := make([]storage.NotificationInput, len(sensors))
	for i, id := range sensors {
		events[i] = storage.NotificationInput{EventID: "backlog-e-" + id, Type: "state_changed", SensorID: id,
			Data: &data, Previous: &prev, At: time.Now()}
	}
	created, err := fanout.NewPostgresStore(b.pg).CreateNotificationsClaiming(b.ctx, events,
		fanout.Claim{Max: n, LeasedUntil: until})
	if err != nil || len(created.Claimed) != places {
		t.Fatalf("created %d claimed (err %v), want %d", len(created.Claimed), err, places)
	}
	r.Deliver(created.Claimed, created.ClaimedTargets)
	waitFor(t, "the first attempts to reach the sink", func() bool { return got.Load() >= workers })
	close(hold)
	for _, d := range created.Claimed {
		b.waitState(d.ID, storage.DeliverySent, 1)
	}
	if got.Load() != int64(places) || most.Load() > workers {
		t.Fatalf("sink got %d webhooks, at most %d at once; want %d, at most %d at once", got.Load(), most.Load(), places, workers)
	}
	var rows int
	if err := b.pg.Pool().QueryRow(b.ctx, `SELECT count(*) FROM deliveries`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d delivery rows (err %v), want none: every first attempt succeeded", rows, err)
	}
}

// TestHandoffTooLateForItsLeaseIsGivenBack: a handed-over webhook whose lease
// ends before an attempt started now could time out (it waited in the
// backlog) is given back unsent, due at once, its attempt given back, rather
// than sent while the lease sweep may give it to another retrier.
func TestHandoffTooLateForItsLeaseIsGivenBack(t *testing.T) {
	t.Parallel()
	s := newSink(t, http.StatusNoContent)
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	r := b.newRetrier(retrier.Config{FallbackPollInterval: time.Hour}, b.reg)
	b.run(r)
	n, _ := reserve(t, r)
	// testConfig's AttemptTimeout is 20 s: a lease ending in 10 s is too short.
	created := handOver(t, b, r, "late-lease-1", n, b.clock.Now().Add(10*time.Second))
	if len(created.Claimed) != 1 {
		t.Fatalf("created %d claimed, want 1", len(created.Claimed))
	}
	r.Deliver(created.Claimed, created.ClaimedTargets)
	// Given back RETRY due at once, attempt given back, it is claimed again
	// (the claim loop polls every 5ms, so its RETRY may last too briefly to be
	// read) under a full lease, and sent: once, as attempt 1, the one logged.
	// The test's clock stands still, so a delivery not due at once would
	// never be claimed again.
	d := b.waitState(created.Claimed[0].ID, storage.DeliverySent, 1)
	if got := counterValue(t, b.reg, "lockstream_delivery_attempts_not_sent_total"); got != 1 {
		t.Fatalf("%v attempts given back unsent, want 1", got)
	}
	if s.count() != 1 {
		t.Fatalf("sink got %d webhooks, want 1 (the claim's, not the hand-over's)", s.count())
	}
	if as, err := b.pg.DeliveryAttempts(b.ctx, d.ID); err != nil || len(as) != 1 || as[0].Attempt != 1 {
		t.Fatalf("attempts = %+v, %v; want one logged, attempt 1: none for the attempt not made", as, err)
	}
}

// TestHandoffSendsEmailsToo: a retrier whose lane sends emails says so
// (SendsEmail), and an email the fan-out created claimed for it is sent and
// recorded on its row with no claim, beside its webhook; one without an email
// sender does not take emails.
func TestHandoffSendsEmailsToo(t *testing.T) {
	t.Parallel()
	s := newSink(t, http.StatusNoContent)
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	if r := b.newRetrier(retrier.Config{}, prometheus.NewRegistry()); r.SendsEmail() {
		t.Fatal("a retrier with no email sender says it sends emails")
	}
	address := "ops@example.com"
	if _, err := b.registry.UpdateClient(b.ctx, b.client.ID, registry.ClientUpdate{Email: &address}); err != nil {
		t.Fatal(err)
	}
	sender, err := webhook.New(webhook.Config{AllowPrivate: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sender.Close)
	emails := &emailSender{}
	r, err := retrier.New(b.testConfig(retrier.Config{FallbackPollInterval: time.Hour}),
		retrier.Deps{Store: b.pg, Attempts: b.stores.ClickHouse, Webhook: sender, Email: emails},
		prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !r.SendsEmail() {
		t.Fatal("a retrier with an email sender in its webhook lane says it sends no emails")
	}
	b.run(r)
	var n int
	var until time.Time
	waitFor(t, "the retrier to reserve two places", func() bool {
		if n, until = r.Reserve(2); n == 2 {
			return true
		}
		r.Release(n)
		return false
	})
	data, prev := 1, 0
	created, err := fanout.NewPostgresStore(b.pg).CreateNotificationsClaiming(b.ctx, []storage.NotificationInput{{
		EventID: "handed-email-1", Type: "state_changed", SensorID: sensorID, Data: &data, Previous: &prev, At: time.Now(),
	}}, fanout.Claim{Max: n, LeasedUntil: until, Email: r.SendsEmail()})
	if err != nil {
		t.Fatal(err)
	}
	r.Release(n - len(created.Claimed))
	if len(created.Claimed) != 2 {
		t.Fatalf("created %+v claimed, want the event's webhook and email", created.Claimed)
	}
	r.Deliver(created.Claimed, created.ClaimedTargets)
	for _, d := range created.Claimed {
		b.waitState(d.ID, storage.DeliverySent, 1)
	}
	if got := emails.sent(); len(got) != 1 || got[0] != address+" handed-email-1 1" {
		t.Fatalf("emails sent %q, want one to %s on attempt 1", got, address)
	}
	if s.count() != 1 {
		t.Fatalf("sink got %d webhooks, want 1", s.count())
	}
}
