package retrier_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
)

// startControlled starts a retrier with the delivery controls: Redis limits and
// the endpoint store.
func (b *bundle) startControlled(cfg retrier.Config) {
	b.t.Helper()
	sender, err := webhook.New(webhook.Config{AllowPrivate: true, Timeout: 10 * time.Second}, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(sender.Close)
	r, err := retrier.New(b.testConfig(cfg), retrier.Deps{Store: b.pg, Attempts: b.stores.ClickHouse, Webhook: sender,
		Endpoints: b.pg, Limiter: b.stores.Redis}, b.reg, slog.New(slog.NewTextHandler(b.logs, nil)))
	if err != nil {
		b.t.Fatal(err)
	}
	b.cancel, b.stopped = b.run(r)
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			total := 0.0
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
			return total
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A 429 with Retry-After holds back the whole endpoint, for every retrier:
// the next delivery to it (another sensor's) is pushed back into the outbox
// without using up an attempt or reaching the endpoint, and the endpoint's
// health counts the 429 as a failure.
func TestRetrierHoldsBackAnEndpointThatAnswered429(t *testing.T) {
	t.Parallel()
	s := newSink(t, http.StatusTooManyRequests, http.StatusOK)
	s.header = http.Header{"Retry-After": []string{"30"}}
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	const other = "OtherSensor"
	if _, err := b.registry.CreateSensor(b.ctx, registry.Sensor{ID: other, Address: "2 Main St"}); err != nil {
		t.Fatal(err)
	}
	if err := b.registry.LinkSensor(b.ctx, b.client.ID, other); err != nil {
		t.Fatal(err)
	}
	b.startControlled(retrier.Config{})

	first := b.flip("e1", 1, time.Now())
	b.waitState(first.ID, storage.DeliveryRetry, 1)
	waitFor(t, "the endpoint to be held back", func() bool {
		return counterValue(t, b.reg, "lockstream_endpoint_429_holds_total") == 1
	})
	data, prev := 1, 0
	if _, err := fanout.NewPostgresStore(b.pg).CreateNotifications(b.ctx, []storage.NotificationInput{{EventID: "o1", Type: "state_changed",
		SensorID: other, Data: &data, Previous: &prev, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); now.After(b.clock.Now()) {
		b.clock.Set(now)
	}
	var held storage.Delivery
	waitFor(t, "the other sensor's delivery to be held back", func() bool {
		ds, err := b.pg.ListClientDeliveries(b.ctx, b.client.ID, storage.DeliveryFilter{}, storage.Page{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.EventID == "o1" && d.State == storage.DeliveryRetry {
				held = d
				return true
			}
		}
		return false
	})
	if held.Attempts != 0 || held.NextAttemptAt.Before(b.clock.Now().Add(20*time.Second)) {
		t.Errorf("held-back delivery: %d attempts, due in %v; want 0 attempts, due in about 30 s",
			held.Attempts, held.NextAttemptAt.Sub(b.clock.Now()))
	}
	if n := counterValue(t, b.reg, "lockstream_deliveries_rate_limited_total"); n < 1 {
		t.Errorf("rate-limited deliveries counted: %v", n)
	}
	if n := s.count(); n != 1 {
		t.Errorf("the endpoint got %d requests, want the one that answered 429", n)
	}
	c, err := b.registry.GetClient(b.ctx, b.client.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c.WebhookFailures != 1 || c.WebhookFailingSince.IsZero() {
		t.Errorf("endpoint health: failing since %v, %d failures; want the 429 counted", c.WebhookFailingSince, c.WebhookFailures)
	}
}

// The retrier tells a client that its endpoint is failing (after
// FailingAfter consecutive failures, once) and that it recovered (the next
// success), on its feed, at once, and never by the webhook: the sink only
// ever sees the sensor's event.
func TestRetrierPublishesEndpointNotices(t *testing.T) {
	t.Parallel()
	s := newSink(t, 500, 500, 500, 200)
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	b.startControlled(retrier.Config{FailingAfter: 2})
	d := b.flip("e1", 1, time.Now().Add(-time.Second))

	feed := func() []string {
		events, err := b.pg.ListClientEvents(b.ctx, b.client.ID, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, e := range events {
			types = append(types, string(e.Type))
		}
		return types
	}
	for attempt := 1; attempt <= 3; attempt++ {
		got := b.waitState(d.ID, storage.DeliveryRetry, attempt)
		if attempt == 2 {
			waitFor(t, "endpoint_failing on the feed", func() bool { return len(feed()) == 2 })
		}
		b.clock.Set(got.NextAttemptAt)
	}
	b.waitState(d.ID, storage.DeliverySent, 4)
	waitFor(t, "endpoint_recovered on the feed", func() bool { return len(feed()) == 3 })
	if got := strings.Join(feed(), ","); got != "state_changed,endpoint_failing,endpoint_recovered" {
		t.Errorf("feed %s, want the event, endpoint_failing once, endpoint_recovered", got)
	}
	for _, r := range s.requests() {
		if r.body.Type != "state_changed" {
			t.Errorf("the webhook carried a %s", r.body.Type)
		}
	}
}
