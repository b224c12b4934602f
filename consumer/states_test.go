package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/internal/runtest"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// heldStates is Postgres whose state writes wait until release is closed; it
// notes a lookup made while a write waits.
type heldStates struct {
	*consumer.PostgresStore
	release chan struct{}

	mu               sync.Mutex
	waiting          int
	lookupsWhileHeld int
}

func (h *heldStates) ApplyStateChanges(ctx context.Context, changes []consumer.StateChange) error {
	h.mu.Lock()
	h.waiting++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.waiting--
		h.mu.Unlock()
	}()
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.PostgresStore.ApplyStateChanges(ctx, changes)
}

func (h *heldStates) LookupSensors(ctx context.Context, ids []string) ([]consumer.SensorLookup, error) {
	h.mu.Lock()
	if h.waiting > 0 {
		h.lookupsWhileHeld++
	}
	h.mu.Unlock()
	return h.PostgresStore.LookupSensors(ctx, ids)
}

// TestEventsDoNotWaitForStates: a partition's batches produce their events
// while Postgres holds the first batch's states; none of them is counted
// consumed or committed until their states are stored, and then all are.
func TestEventsDoNotWaitForStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	cfg := streamtest.Config(t, 1)
	var inputs []input
	// Three batches of two: while the first batch's states wait, the other two
	// batches' wait in the queue (2 × MaxPollRecords changes) after their
	// events were produced.
	for i := range 6 {
		id := fmt.Sprintf("s%d", i)
		if _, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: id, Address: "here"}); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, input{key: []byte(id), value: fmt.Appendf(nil, `{"sensor_id":%q,"data":1}`, id),
			sensor: id, data: 1})
	}
	records := produce(t, streamtest.Client(t, cfg), cfg, inputs)
	want := expect(records, timestamps(t, cfg), streamtest.TopicID(t, cfg, cfg.ReadingsTopic()), nil)

	pg := consumer.NewPostgresStore(stores.Postgres)
	states := &heldStates{PostgresStore: pg, release: make(chan struct{})}
	c, reg := startConsumer(t, consumer.Config{Stream: cfg, MaxPollRecords: 2}, states, nil)
	runtest.WaitFor(t, func() (bool, string) {
		_, n := decodeEvents(t, cfg)
		return n == len(inputs), fmt.Sprintf("%d of %d events produced", n, len(inputs))
	})
	if got := metric(t, reg, "lockstream_readings_consumed_total", nil); got != 0 {
		t.Fatalf("%v readings counted consumed before any state was stored", got)
	}
	if ok, _ := stateMatches(ctx, pg, expectation{ids: want.ids}); !ok {
		t.Fatal("states stored while Postgres held them")
	}
	committed, err := streamtest.Committed(ctx, streamtest.Client(t, cfg), consumer.DefaultGroup, cfg.ReadingsTopic())
	if err != nil {
		t.Fatal(err)
	}
	if committed[0] > 0 {
		t.Fatalf("offset %d committed before its states were stored", committed[0])
	}

	close(states.release)
	runtest.WaitFor(t, func() (bool, string) {
		got := metric(t, reg, "lockstream_readings_consumed_total", nil)
		return got == float64(len(inputs)), fmt.Sprintf("consumed %v of %d", got, len(inputs))
	})
	if ok, why := stateMatches(ctx, pg, want); !ok {
		t.Fatalf("states after the release: %s", why)
	}
	c.Stop(t)
	committed, err = streamtest.Committed(ctx, streamtest.Client(t, cfg), consumer.DefaultGroup, cfg.ReadingsTopic())
	if err != nil {
		t.Fatal(err)
	}
	if committed[0] != int64(len(inputs)) {
		t.Fatalf("committed %v after the stop, want offset %d", committed, len(inputs))
	}
}

// TestCacheStartsOverOnlyFromStoredStates: a worker whose cache outgrew
// CacheSize starts it over from Postgres only once Postgres holds every state
// the cache changed; otherwise it would read a state older than the events it
// produced, and produce a change again.
func TestCacheStartsOverOnlyFromStoredStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	cfg := streamtest.Config(t, 1)
	var inputs []input
	for _, id := range []string{"a", "b", "a"} {
		inputs = append(inputs, input{key: []byte(id), value: fmt.Appendf(nil, `{"sensor_id":%q,"data":1}`, id),
			sensor: id, data: 1})
	}
	for _, id := range []string{"a", "b"} {
		if _, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: id, Address: "here"}); err != nil {
			t.Fatal(err)
		}
	}
	records := produce(t, streamtest.Client(t, cfg), cfg, inputs)
	want := expect(records, timestamps(t, cfg), streamtest.TopicID(t, cfg, cfg.ReadingsTopic()), nil)

	pg := consumer.NewPostgresStore(stores.Postgres)
	states := &heldStates{PostgresStore: pg, release: make(chan struct{})}
	// Batches of two: a and b (two changes, a cache of two sensors, past
	// CacheSize), then a again (no change).
	c, reg := startConsumer(t, consumer.Config{Stream: cfg, MaxPollRecords: 2, CacheSize: 1}, states, nil)
	runtest.WaitFor(t, func() (bool, string) {
		_, n := decodeEvents(t, cfg)
		return n >= 2, fmt.Sprintf("%d of 2 events produced", n)
	})
	// The second batch has reached its worker: it set the partition's lag.
	runtest.WaitFor(t, func() (bool, string) {
		lag, ok := gauge(t, reg, "lockstream_consumer_lag")
		return ok && lag == 0, fmt.Sprintf("lag %v (reported: %v), want the last batch's 0", lag, ok)
	})
	close(states.release)
	runtest.WaitFor(t, func() (bool, string) {
		got := metric(t, reg, "lockstream_readings_consumed_total", nil)
		return got == float64(len(inputs)), fmt.Sprintf("consumed %v of %d", got, len(inputs))
	})
	c.Stop(t)
	if got, n := decodeEvents(t, cfg); n != 2 {
		t.Fatalf("%d events, want a's and b's first readings only: %+v", n, got)
	}
	if ok, why := stateMatches(ctx, pg, want); !ok {
		t.Fatal(why)
	}
	states.mu.Lock()
	defer states.mu.Unlock()
	if states.lookupsWhileHeld > 0 {
		t.Fatalf("%d state lookups while a state write waited", states.lookupsWhileHeld)
	}
}

// gauge returns the value of the named gauge's one series, and whether it
// has one.
func gauge(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}
