package fanout_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// waitTimeout is generous: the tests run under -race on a loaded 2-core machine.
const waitTimeout = 60 * time.Second

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// runFanout runs a Fanout with its own registry until the returned stop is
// called (or the test ends); stop checks that Run returned nil.
func runFanout(t *testing.T, cfg fanout.Config, store fanout.NotificationStore) (*prometheus.Registry, func()) {
	t.Helper()
	reg := prometheus.NewRegistry()
	f, err := fanout.New(cfg, store, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("fanout Run returned %v, want nil", err)
			}
		case <-time.After(waitTimeout):
			t.Errorf("fanout did not stop within %s", waitTimeout)
		}
	}
	t.Cleanup(stop)
	return reg, stop
}

func produce(t *testing.T, client *kgo.Client, topic string, records ...*kgo.Record) {
	t.Helper()
	for _, r := range records {
		r.Topic = topic
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := client.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
}

func eventRecord(t *testing.T, e event.Event) *kgo.Record {
	t.Helper()
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Key: []byte(e.SensorID), Value: b}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func TestFanoutCreatesDeliveriesOncePerEvent(t *testing.T) {
	t.Parallel()
	scfg := streamtest.Config(t, 3)
	stores := storagetest.New(t)
	pg, ctx := stores.Postgres, context.Background()
	for _, id := range []string{"s1", "s2"} {
		if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: id, Address: "at " + id}); err != nil {
			t.Fatal(err)
		}
	}
	client, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "c", WebhookURL: "https://example.com/h",
		Email: "c@example.com", Secret: "whsec_c2VjcmV0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s1", "s2"} {
		if err := registry.New(pg).LinkSensor(ctx, client.ID, id); err != nil {
			t.Fatal(err)
		}
	}
	deliveries := func() []storage.Delivery {
		ds, err := pg.ListClientDeliveries(ctx, client.ID, storage.DeliveryFilter{}, storage.Page{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}

	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	one, zero := 1, 0
	flip1 := event.Event{ID: event.StateChangedID("s1", [16]byte{}, 0, 1), Type: event.StateChanged, SensorID: "s1", Data: &one, At: t0}
	flip2 := event.Event{ID: event.StateChangedID("s1", [16]byte{}, 0, 2), Type: event.StateChanged, SensorID: "s1", Data: &zero,
		Previous: &one, At: t0.Add(time.Second)}
	lost := event.Event{ID: event.ConnectionLostID("s2", t0), Type: event.ConnectionLost, SensorID: "s2", At: t0}
	unwatched := event.Event{ID: event.ConnectionLostID("nobody", t0), Type: event.ConnectionLost, SensorID: "nobody", At: t0}

	producer := streamtest.Client(t, scfg)
	topic := scfg.EventsTopic()
	produce(t, producer, topic, eventRecord(t, flip1), &kgo.Record{Key: []byte("s1"), Value: []byte("not json")},
		eventRecord(t, lost), eventRecord(t, unwatched))

	cfg := fanout.Config{Stream: scfg, RetryBackoff: 10 * time.Millisecond}
	reg, stop := runFanout(t, cfg, fanout.NewPostgresStore(pg))
	waitFor(t, "the first events' deliveries", func() bool { return len(deliveries()) == 4 })
	rejected := func() float64 {
		return counterValue(t, reg, "lockstream_fanout_rejected_total", map[string]string{"reason": "decode"})
	}
	waitFor(t, "the bad record's rejection", func() bool { return rejected() >= 1 })
	if got := rejected(); got != 1 {
		t.Fatalf("rejected records = %v, want 1", got)
	}

	// A record after the bad one is consumed too, and the newer flip supersedes
	// the older one's undelivered deliveries.
	produce(t, producer, topic, eventRecord(t, flip2))
	waitFor(t, "the second flip's deliveries", func() bool { return len(deliveries()) == 6 })
	byEvent := map[string][]storage.DeliveryState{}
	for _, d := range deliveries() {
		byEvent[d.EventID] = append(byEvent[d.EventID], d.State)
	}
	for id, want := range map[string]storage.DeliveryState{
		flip1.ID: storage.DeliverySuperseded, flip2.ID: storage.DeliveryPending, lost.ID: storage.DeliveryPending,
	} {
		if states := byEvent[id]; len(states) != 2 || states[0] != want || states[1] != want {
			t.Errorf("deliveries of %s: %v, want webhook and email %s", id, states, want)
		}
	}
	// The fan-out counts a batch just after committing it: wait for the counts
	// to reach what the deliveries show, then check they did not pass it.
	superseded := func() float64 {
		return counterValue(t, reg, "lockstream_deliveries_total", map[string]string{"channel": "email", "outcome": "superseded"})
	}
	created := func() float64 { return counterValue(t, reg, "lockstream_notifications_created_total", nil) }
	waitFor(t, "the fan-out's counts", func() bool { return superseded() >= 1 && created() >= 3 })
	if got := superseded(); got != 1 {
		t.Errorf("superseded email deliveries = %v, want 1", got)
	}
	if got := created(); got != 3 {
		t.Errorf("notifications created = %v, want 3", got)
	}
	stop()

	// Offsets were committed: a new fan-out process reads only what comes after,
	// and a replay of old events creates nothing.
	produce(t, producer, topic, eventRecord(t, flip1), eventRecord(t, lost))
	reg2, _ := runFanout(t, cfg, fanout.NewPostgresStore(pg))
	waitFor(t, "the replayed events to be consumed", func() bool {
		return counterValue(t, reg2, "lockstream_fanout_events_total", nil) >= 2
	})
	if got := counterValue(t, reg2, "lockstream_fanout_events_total", nil); got != 2 {
		t.Fatalf("restarted fan-out consumed %v events, want only the 2 produced after the commit", got)
	}
	if got := counterValue(t, reg2, "lockstream_notifications_created_total", nil); got != 0 {
		t.Fatalf("replayed events created %v notifications, want 0", got)
	}
	if n := len(deliveries()); n != 6 {
		t.Fatalf("%d deliveries after the replay, want 6", n)
	}
}
