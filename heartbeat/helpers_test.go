package heartbeat_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// The heartbeat's stores are what its interfaces describe.
var (
	_ heartbeat.TrackerStore    = (*heartbeat.RedisStore)(nil)
	_ heartbeat.DaemonStore     = (*heartbeat.RedisStore)(nil)
	_ heartbeat.TrackerRegistry = (*heartbeat.PostgresStore)(nil)
	_ heartbeat.Registry        = (*heartbeat.PostgresStore)(nil)
	_ heartbeat.History         = (*heartbeat.ClickHouseStore)(nil)
	_ heartbeat.States          = (*heartbeat.PostgresStore)(nil)
	_ heartbeat.OpenAlerts      = (*heartbeat.PostgresStore)(nil)
	_ heartbeat.Sites           = (*heartbeat.PostgresStore)(nil)
	_ heartbeat.SiteStore       = (*heartbeat.RedisStore)(nil)
	_ heartbeat.Maintenance     = (*heartbeat.PostgresStore)(nil)
	_ heartbeat.Flapping        = (*heartbeat.PostgresStore)(nil)
)

// testTimeout is the heartbeat timeout of the tests: with the default coalescing
// fraction a sensor seen at a whole second s is due at s+3s (s + 2.2s, rounded up).
const testTimeout = 2 * time.Second

// clock is a manual clock: the daemons and trackers read it, the test moves it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// bundle is one test's world: its own Postgres, ClickHouse, Redis prefix and Kafka
// topics, a manual clock starting at a whole second t0, and a Tracker.
type bundle struct {
	stores  *storagetest.Stores
	hb      heartbeat.Stores
	kafka   stream.Config
	clock   *clock
	t0      time.Time
	cfg     heartbeat.Config
	reg     *prometheus.Registry
	tracker *heartbeat.Tracker
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{stores: storagetest.New(t), kafka: streamtest.Config(t, 1)}
	b.hb = heartbeat.NewStores(b.stores.Postgres, b.stores.Redis, b.stores.ClickHouse)
	b.t0 = time.Now().UTC().Truncate(time.Second).Add(time.Second)
	b.clock = &clock{now: b.t0}
	b.cfg = heartbeat.Config{Timeout: testTimeout, SweepInterval: 20 * time.Millisecond, ClaimBatch: 5, Now: b.clock.Now}
	b.reg = prometheus.NewRegistry()
	b.tracker = b.newTracker(t, b.reg)
	return b
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (b *bundle) newTracker(t *testing.T, reg prometheus.Registerer) *heartbeat.Tracker {
	t.Helper()
	return b.newTrackerWith(t, b.hb.Postgres, reg, discard())
}

// newTrackerWith returns a Tracker reading timeouts and coverage from registry
// and logging to logger.
func (b *bundle) newTrackerWith(t *testing.T, registry heartbeat.TrackerRegistry, reg prometheus.Registerer, logger *slog.Logger) *heartbeat.Tracker {
	t.Helper()
	tr, err := heartbeat.NewTracker(b.cfg, b.hb.Redis, registry, reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// newDaemon returns a daemon with its own metrics registry, publishing through pub
// (nil: straight to the test's Kafka topic).
func (b *bundle) newDaemon(t *testing.T, pub heartbeat.Publisher) (*heartbeat.Daemon, *prometheus.Registry) {
	t.Helper()
	return b.newDaemonWith(t, pub, discard())
}

// newDaemonWith is newDaemon logging to logger.
func (b *bundle) newDaemonWith(t *testing.T, pub heartbeat.Publisher, logger *slog.Logger) (*heartbeat.Daemon, *prometheus.Registry) {
	t.Helper()
	if pub == nil {
		pub = b.publisher(t)
	}
	reg := prometheus.NewRegistry()
	d, err := heartbeat.New(b.cfg, b.hb.Deps(pub, nil), reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	return d, reg
}

// at is t0 plus seconds.
func (b *bundle) at(seconds float64) time.Time {
	return b.t0.Add(time.Duration(seconds * float64(time.Second)))
}

// advance sets the clock to t0 plus seconds.
func (b *bundle) advance(seconds float64) { b.clock.Set(b.at(seconds)) }

// record reports sightings of sensors at the clock's time and returns the events.
func (b *bundle) record(t *testing.T, tr *heartbeat.Tracker, sensors ...string) []event.Event {
	t.Helper()
	seen := make(map[string]time.Time, len(sensors))
	for _, s := range sensors {
		seen[s] = b.clock.Now()
	}
	events, err := tr.Record(context.Background(), seen)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

func sweep(t *testing.T, d *heartbeat.Daemon) {
	t.Helper()
	if err := d.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// kafkaPublisher produces events to the test's lockstream.events topic, keyed by
// sensor id, the way the real publisher does.
type kafkaPublisher struct {
	client *kgo.Client
	topic  string
}

func (b *bundle) publisher(t *testing.T) *kafkaPublisher {
	return &kafkaPublisher{client: streamtest.Client(t, b.kafka), topic: b.kafka.EventsTopic()}
}

func (p *kafkaPublisher) Publish(ctx context.Context, events []event.Event) error {
	records := make([]*kgo.Record, len(events))
	for i, e := range events {
		value, err := e.Encode()
		if err != nil {
			return err
		}
		records[i] = &kgo.Record{Topic: p.topic, Key: []byte(e.SensorID), Value: value}
	}
	return p.client.ProduceSync(ctx, records...).FirstErr()
}

// flakyPublisher fails its first failures calls, then publishes to Kafka.
type flakyPublisher struct {
	next     heartbeat.Publisher
	mu       sync.Mutex
	failures int
}

var errBrokerDown = errors.New("broker down")

func (p *flakyPublisher) Publish(ctx context.Context, events []event.Event) error {
	p.mu.Lock()
	fail := p.failures > 0
	if fail {
		p.failures--
	}
	p.mu.Unlock()
	if fail {
		return errBrokerDown
	}
	return p.next.Publish(ctx, events)
}

// published returns every event on the test's events topic so far.
func (b *bundle) published(t *testing.T) []event.Event {
	t.Helper()
	var events []event.Event
	for _, r := range streamtest.ReadAll(t, b.kafka, b.kafka.EventsTopic()) {
		e, err := event.Decode(r.Value)
		if err != nil {
			t.Fatalf("event on the topic: %v", err)
		}
		if string(r.Key) != e.SensorID {
			t.Errorf("event %s keyed %q, want its sensor %q", e.ID, r.Key, e.SensorID)
		}
		events = append(events, e)
	}
	return events
}

// ofType counts events of type typ per sensor.
func ofType(events []event.Event, typ event.Type) map[string]int {
	n := map[string]int{}
	for _, e := range events {
		if e.Type == typ {
			n[e.SensorID]++
		}
	}
	return n
}

// waitFor polls cond until it holds, failing the test after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sweeps is how many sweeps a daemon has finished, from its duration histogram.
func sweeps(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "lockstream_heartbeat_sweep_duration_seconds" {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			m := f.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// flushRedis deletes every key of the test's prefix: Redis losing its data, as a
// restart without persistence or a failover would, without touching other tests.
func (b *bundle) flushRedis(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	opts, err := redis.ParseURL(b.stores.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	defer client.Close()
	var keys []string
	iter := client.Scan(ctx, 0, b.stores.RedisPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no heartbeat keys to delete")
	}
	if err := client.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
}
