package heartbeat_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// The Kafka side of the watermark is stream.Progress.
var _ heartbeat.Progress = (*stream.Progress)(nil)

// stateGroup stands for the state consumer's group in these tests.
const stateGroup = "lockstream-state"

// lagging is a state consumer the test drives by hand on the bundle's one-partition
// readings topic: readings are produced with the times the test gives them, and
// consumed (sightings recorded through the tracker, then the offset committed, as
// the consumer does) only when the test says so.
type lagging struct {
	b        *bundle
	client   *kgo.Client
	adm      *kadm.Client
	produced []sighting
	consumed int
}

type sighting struct {
	sensor string
	at     time.Time
}

func newLagging(t *testing.T, b *bundle) *lagging {
	t.Helper()
	client := streamtest.Client(t, b.kafka, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	return &lagging{b: b, client: client, adm: kadm.NewClient(client)}
}

// produce appends a reading of each sensor stamped t0 + seconds.
func (l *lagging) produce(t *testing.T, seconds float64, sensors ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range sensors {
		r := &kgo.Record{Topic: l.b.kafka.ReadingsTopic(), Key: []byte(s), Value: []byte(`{}`), Timestamp: l.b.at(seconds)}
		if err := l.client.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		l.produced = append(l.produced, sighting{sensor: s, at: r.Timestamp})
	}
}

// consumeUntil consumes every produced reading stamped before t0 + seconds, as one
// batch, and returns the events the tracker gave for it.
func (l *lagging) consumeUntil(t *testing.T, seconds float64) []event.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := map[string]time.Time{}
	for l.consumed < len(l.produced) && l.produced[l.consumed].at.Before(l.b.at(seconds)) {
		r := l.produced[l.consumed]
		if r.at.After(seen[r.sensor]) {
			seen[r.sensor] = r.at
		}
		l.consumed++
	}
	events, err := l.b.tracker.Record(ctx, seen)
	if err != nil {
		t.Fatal(err)
	}
	var offsets kadm.Offsets
	offsets.Add(kadm.Offset{Topic: l.b.kafka.ReadingsTopic(), Partition: 0, At: int64(l.consumed), LeaderEpoch: -1})
	resp, err := l.adm.CommitOffsets(ctx, stateGroup, offsets)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// newWatermarkDaemon returns a daemon of b that judges deadlines by the progress of
// stateGroup on cfg's cluster.
func (b *bundle) newWatermarkDaemon(t *testing.T, cfg stream.Config, opts ...kgo.Opt) (*heartbeat.Daemon, *prometheus.Registry) {
	t.Helper()
	progress, err := stream.NewProgress(stream.ProgressConfig{Stream: cfg, Group: stateGroup, Refetch: time.Nanosecond},
		streamtest.Client(t, cfg, opts...), discard())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	d, err := heartbeat.New(b.cfg, heartbeat.Deps{
		Store: b.hb.Redis, Registry: b.hb.Postgres, History: b.hb.ClickHouse,
		Publisher: b.publisher(t), Progress: progress,
	}, reg, discard())
	if err != nil {
		t.Fatal(err)
	}
	return d, reg
}

// TestStalledConsumerDeclaresNoFalseLoss stalls the state consumer while "chatty"
// keeps reporting and "quiet" falls silent, long after both deadlines by the clock:
// nothing is declared lost while consumption stands still; as it catches up, quiet
// is declared lost once consumption passed its deadline, chatty never.
func TestStalledConsumerDeclaresNoFalseLoss(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := newLagging(t, b)
	d, reg := b.newWatermarkDaemon(t, b.kafka)

	l.produce(t, 0, "quiet", "chatty")
	l.consumeUntil(t, 0.5) // both due at t0+3
	// The consumer stalls; chatty reports every second for 12 s.
	for s := 1; s <= 12; s++ {
		l.produce(t, float64(s), "chatty")
	}
	for s := 1; s <= 12; s++ {
		b.advance(float64(s))
		sweep(t, d)
	}
	if events := b.published(t); len(events) != 0 {
		t.Fatalf("a stalled consumer made the sweep publish %+v", events)
	}
	if lag := counter(t, reg, "lockstream_heartbeat_watermark_lag_seconds"); lag != 11 {
		t.Errorf("watermark lag %v s, want 11 (clock t0+12, first unconsumed reading t0+1)", lag)
	}

	// Consumption reaches t0+2 (the first reading not consumed): still before
	// quiet's deadline.
	l.consumeUntil(t, 1.5)
	b.advance(12.1) // Progress reads a moved offset's record once Refetch (1ns) has passed on the clock
	sweep(t, d)
	if events := b.published(t); len(events) != 0 {
		t.Fatalf("consumption before quiet's deadline made the sweep publish %+v", events)
	}
	// Consumption reaches t0+5: quiet's deadline (t0+3) has passed in record
	// time; chatty's (t0+4+3) has not.
	l.consumeUntil(t, 4.5)
	b.advance(12.2)
	sweep(t, d)
	events := b.published(t)
	if len(events) != 1 || events[0].Type != event.ConnectionLost || events[0].SensorID != "quiet" ||
		!events[0].At.Equal(b.at(3)) {
		t.Fatalf("after consuming to t0+5 the topic holds %+v, want quiet lost at %v", events, b.at(3))
	}
	// Caught up: the clock rules again; chatty reported at t0+12, due at t0+15.
	l.consumeUntil(t, 100)
	sweep(t, d)
	if lag := counter(t, reg, "lockstream_heartbeat_watermark_lag_seconds"); lag != 0 {
		t.Errorf("caught up: watermark lag %v s, want 0", lag)
	}
	b.advance(15)
	sweep(t, d)
	events = b.published(t)
	if lost := ofType(events, event.ConnectionLost); len(events) != 2 || lost["quiet"] != 1 || lost["chatty"] != 1 ||
		!events[1].At.Equal(b.at(15)) {
		t.Fatalf("after chatty fell silent the topic holds %+v, want quiet's loss and chatty's at %v", events, b.at(15))
	}
}

// TestUnknownWatermarkDeclaresNothing: with Kafka out of reach the sweep cannot
// tell how far consumption got, so it declares no sensor lost, counts it and
// reports the error; once the watermark is known again, the loss is declared.
func TestUnknownWatermarkDeclaresNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	gone := stream.Config{Brokers: c.ListenAddrs(), Partitions: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stream.EnsureTopics(ctx, streamtest.Client(t, gone), gone); err != nil {
		t.Fatal(err)
	}
	d, reg := b.newWatermarkDaemon(t, gone, kgo.RetryTimeout(time.Second), kgo.RequestRetries(1))
	b.record(t, b.tracker, "quiet") // due at t0+3
	c.Close()

	b.advance(10)
	if err := d.Sweep(ctx); err == nil {
		t.Fatal("sweep with Kafka down returned no error")
	}
	if events := b.published(t); len(events) != 0 {
		t.Fatalf("sweep without a watermark published %+v", events)
	}
	if n := counter(t, reg, "lockstream_heartbeat_watermark_errors_total"); n != 1 {
		t.Errorf("watermark_errors_total = %v, want 1", n)
	}
	if n := counter(t, reg, "lockstream_heartbeat_tracked_sensors"); n != 1 {
		t.Errorf("tracked_sensors = %v after the failed sweep, want 1: the rest of the sweep still runs", n)
	}

	d2, _ := b.newWatermarkDaemon(t, b.kafka) // an empty topic: caught up
	sweep(t, d2)
	if events := b.published(t); len(events) != 1 || events[0].SensorID != "quiet" {
		t.Fatalf("with the watermark back the topic holds %+v, want quiet's loss", events)
	}
}

// TestRestoreNeverPrecedesItsLoss: a reading stamped before the deadline that was
// recorded only after the loss was declared (record times that went backwards, or
// a daemon judging by the clock alone) still ends the loss, but its restore is
// timed at the loss, not before it, so no client receives it first.
func TestRestoreNeverPrecedesItsLoss(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.newDaemon(t, nil)    // the clock alone
	b.record(t, b.tracker, "late") // due at t0+3
	b.advance(10)
	sweep(t, d)
	if events := b.published(t); len(events) != 1 || events[0].Type != event.ConnectionLost {
		t.Fatalf("topic holds %+v, want late's loss", events)
	}
	events, err := b.tracker.Record(context.Background(), map[string]time.Time{"late": b.at(2.5)})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Type != event.ConnectionRestored ||
		events[0].ID != event.ConnectionRestoredID("late", b.at(3)) || !events[0].At.Equal(b.at(3)) {
		t.Fatalf("late reading gave %+v, want late's restore timed at its loss, %v", events, b.at(3))
	}
}
