package retrier_test

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
)

// TestWakeupsDeliverWithoutPolling runs a retrier that polls once an hour with
// the outbox listener as Deps.Wakeups: each new delivery reaches the sink all
// the same, because the fan-out's transaction (CreateNotifications) notifies
// storage.OutboxChannel and the listener wakes the claim loop. The second
// delivery is created after the first was sent, while the claim loop waits:
// nothing but the notification can bring it.
func TestWakeupsDeliverWithoutPolling(t *testing.T) {
	t.Parallel()
	s := newSink(t, http.StatusNoContent)
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	sender, err := webhook.New(webhook.Config{AllowPrivate: true, Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sender.Close)
	cfg := retrier.Config{PollInterval: time.Hour, FallbackPollInterval: time.Hour, AttemptFlushInterval: 10 * time.Millisecond,
		LeaseSweepInterval: time.Hour, StatsInterval: time.Hour}
	r, err := retrier.New(cfg, retrier.Deps{Store: b.pg, Attempts: b.stores.ClickHouse, Webhook: sender, Wakeups: b.pg},
		b.reg, slog.New(slog.NewTextHandler(b.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	b.run(r)
	waitFor(t, "the retrier to listen", func() bool {
		return metricValue(t, b, "lockstream_retrier_listening") == 1
	})
	for i, id := range []string{"wake-1", "wake-2"} {
		data := i % 2
		prev := 1 - data
		if _, err := fanout.NewPostgresStore(b.pg).CreateNotifications(b.ctx, []storage.NotificationInput{{
			EventID: id, Type: "state_changed", SensorID: sensorID, Data: &data, Previous: &prev, At: time.Now(),
		}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "webhook "+id, func() bool { return s.count() == i+1 })
	}
	for i, req := range s.requests() {
		if err := webhook.Verify(b.client.Secret, req.header, req.raw, 0); err != nil {
			t.Errorf("webhook %d: %v", i, err)
		}
	}
}

// metricValue gathers one unlabelled gauge or counter of the bundle's registry.
func metricValue(t *testing.T, b *bundle, name string) float64 {
	t.Helper()
	n, err := testutil.GatherAndCount(b.reg, name)
	if err != nil || n == 0 {
		return -1
	}
	families, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			m := f.GetMetric()[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return -1
}
