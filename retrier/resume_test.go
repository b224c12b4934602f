package retrier_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
	"github.com/prometheus/client_golang/prometheus"
)

// disableEndpoint disables the bundle's client's endpoint as the sweep does:
// three failures an hour ago, a sweep now.
func (b *bundle) disableEndpoint() {
	b.t.Helper()
	ago := time.Now().Add(-time.Hour)
	var fails []storage.WebhookOutcome
	for i := range 3 {
		fails = append(fails, storage.WebhookOutcome{ClientID: b.client.ID, At: ago.Add(time.Duration(i) * time.Second)})
	}
	if _, err := b.pg.RecordWebhookHealth(b.ctx, fails, 100); err != nil {
		b.t.Fatal(err)
	}
	sweep, err := b.pg.DisableFailingEndpoints(b.ctx, time.Now(), time.Minute, 3)
	if err != nil || len(sweep.Disabled) != 1 {
		b.t.Fatalf("disabling the endpoint: %+v, %v", sweep, err)
	}
}

// linkSensors registers count more sensors and links them to the client.
func (b *bundle) linkSensors(prefix string, count int) []string {
	b.t.Helper()
	ids := make([]string, count)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%02d", prefix, i)
		if _, err := b.registry.CreateSensor(b.ctx, registry.Sensor{ID: ids[i], Address: ids[i] + " St"}); err != nil {
			b.t.Fatal(err)
		}
		if err := b.registry.LinkSensor(b.ctx, b.client.ID, ids[i]); err != nil {
			b.t.Fatal(err)
		}
	}
	return ids
}

// An endpoint disabled and then enabled receives its kept deliveries in the
// order their events happened, across all its sensors, not only each sensor's
// in order: the retrier (256 workers, claims of 100) would otherwise send the
// 36 at once, and they would reach the endpoint in whatever order the
// connections were made.
func TestResumedEndpointReceivesKeptDeliveriesInEventOrder(t *testing.T) {
	t.Parallel()
	s := newSink(t, http.StatusOK)
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	doors := b.linkSensors("KeptDoor", 12)
	b.disableEndpoint()

	// Three rounds over twelve sensors, a millisecond apart: the kept order.
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	var events []storage.NotificationInput
	var want []string
	for round := range 3 {
		for i, door := range doors {
			data, prev := (round+1)%2, round%2
			id := fmt.Sprintf("kept-%d-%s", round, door)
			events = append(events, storage.NotificationInput{EventID: id, Type: "state_changed", SensorID: door,
				Data: &data, Previous: &prev, At: t0.Add(time.Duration(round*len(doors)+i) * time.Millisecond)})
			want = append(want, fmt.Sprintf("%s=%d", door, data))
		}
	}
	// Created in shuffled batches: the order is the events', not the inserts'.
	for _, batch := range [][]storage.NotificationInput{events[20:], events[:20]} {
		if _, err := fanout.NewPostgresStore(b.pg).CreateNotifications(b.ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := b.pg.ListClientDeliveries(b.ctx, b.client.ID, storage.DeliveryFilter{State: storage.DeliveryPaused}, storage.Page{Limit: 100})
	if err != nil || len(ds) != len(events) {
		t.Fatalf("%d PAUSED deliveries (%v), want %d", len(ds), err, len(events))
	}
	resumed, err := b.pg.EnableEndpoint(b.ctx, b.client.ID)
	if err != nil || resumed != len(events) {
		t.Fatalf("enable: %d resumed, %v; want %d", resumed, err, len(events))
	}
	b.startControlled(retrier.Config{Now: time.Now})
	waitFor(t, fmt.Sprintf("%d webhooks", len(events)), func() bool { return s.count() >= len(events) })
	var got []string
	rs := s.requests()
	t.Logf("%d kept webhooks in %v", len(rs), rs[len(rs)-1].at.Sub(rs[0].at))
	for _, r := range rs {
		got = append(got, fmt.Sprintf("%s=%d", r.body.Sensor.ID, *r.body.Data))
	}
	if !slices.Equal(got, want) {
		t.Errorf("the endpoint received\n%v\nwant the events' order\n%v", got, want)
	}
}

// An endpoint limited to 5 a second gets every delivery even when nothing
// else wakes the retrier: a delivery the limiter holds back for w is claimed
// again when w has passed, not at the next poll. The outbox listener is up and
// the fallback poll an hour away, so before this the held deliveries waited an
// hour (at the default 1 s poll: one delivery a second per retrier, since each
// poll's due deliveries are spread again and only the first may start). The
// rate is logged, not asserted: the machine is shared.
func TestRateLimitedEndpointIsNotHeldLongerThanTheLimiterSays(t *testing.T) {
	t.Parallel()
	s := newSink(t, http.StatusOK)
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	five := 5
	if _, err := b.registry.UpdateClient(b.ctx, b.client.ID, registry.ClientUpdate{RateLimit: &five}); err != nil {
		t.Fatal(err)
	}
	doors := b.linkSensors("PacedDoor", 15)
	cfg := b.testConfig(retrier.Config{Now: time.Now})
	cfg.FallbackPollInterval = time.Hour
	b.startPaced(cfg)
	waitFor(t, "the outbox listener", func() bool { return counterGauge(t, b.reg, "lockstream_retrier_listening") == 1 })

	t0 := time.Now().Add(-time.Minute)
	var events []storage.NotificationInput
	for i, door := range doors {
		data, prev := 1, 0
		events = append(events, storage.NotificationInput{EventID: "paced-" + door, Type: "state_changed", SensorID: door,
			Data: &data, Previous: &prev, At: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	if _, err := fanout.NewPostgresStore(b.pg).CreateNotifications(b.ctx, events); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("%d webhooks", len(events)), func() bool { return s.count() >= len(events) })
	rs := s.requests()
	if len(rs) != len(events) {
		t.Errorf("%d requests for %d deliveries", len(rs), len(events))
	}
	if held := counterValue(t, b.reg, "lockstream_deliveries_rate_limited_total"); held < float64(len(events)-5) {
		t.Errorf("%v deliveries held back by the limit, want most of the %d", held, len(events))
	}
	span := rs[len(rs)-1].at.Sub(rs[0].at)
	t.Logf("%d webhooks at rate_limit 5 in %v: %.2f/s", len(rs), span, float64(len(rs)-1)/span.Seconds())
}

// startPaced starts a retrier with the delivery controls and the outbox
// listener.
func (b *bundle) startPaced(cfg retrier.Config) {
	b.t.Helper()
	sender, err := webhook.New(webhook.Config{AllowPrivate: true, Timeout: 10 * time.Second}, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(sender.Close)
	r, err := retrier.New(cfg, retrier.Deps{Store: b.pg, Attempts: b.stores.ClickHouse, Webhook: sender,
		Endpoints: b.pg, Limiter: b.stores.Redis, Wakeups: b.pg}, b.reg, slog.New(slog.NewTextHandler(b.logs, nil)))
	if err != nil {
		b.t.Fatal(err)
	}
	b.cancel, b.stopped = b.run(r)
}

// counterGauge reads a gauge of reg.
func counterGauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}
