package heartbeat_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// seenBehind is a HistoryProgress that tells when a rebuild has found the history
// writer behind.
type seenBehind struct {
	next heartbeat.HistoryProgress
	once sync.Once
	seen chan struct{} // closed at the first non-empty Behind
}

func (s *seenBehind) Ends(ctx context.Context) (map[int32]int64, error) { return s.next.Ends(ctx) }

func (s *seenBehind) Behind(ctx context.Context, ends map[int32]int64) (map[int32]int64, error) {
	behind, err := s.next.Behind(ctx, ends)
	if err == nil && len(behind) > 0 {
		s.once.Do(func() { close(s.seen) })
	}
	return behind, err
}

// lostBeforeTheFlush registers L (1 s timeout), builds the sets, and has L
// declared lost at t0+2, a loss published to the events topic that nothing has
// written to ClickHouse; then Redis loses its data. It returns a daemon whose
// rebuilds wait for the history group through a seenBehind, its metrics, and L's
// loss.
func lostBeforeTheFlush(t *testing.T, b *bundle) (*heartbeat.Daemon, *prometheus.Registry, *seenBehind, event.Event) {
	t.Helper()
	ctx := context.Background()
	if _, err := registry.New(b.stores.Postgres).CreateSensor(ctx,
		registry.Sensor{ID: "L", Address: "somewhere", HeartbeatTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	b.t0 = time.Now().UTC().Truncate(time.Second).Add(time.Second)
	b.clock.Set(b.t0)
	backlog, err := stream.NewBacklog(streamtest.Client(t, b.kafka), history.DefaultGroup, b.kafka.EventsTopic())
	if err != nil {
		t.Fatal(err)
	}
	progress := &seenBehind{next: backlog, seen: make(chan struct{})}
	deps := b.hb.Deps(b.publisher(t), nil)
	deps.HistoryProgress = progress
	reg := prometheus.NewRegistry()
	d, err := heartbeat.New(b.cfg, deps, reg, discard())
	if err != nil {
		t.Fatal(err)
	}
	sweep(t, d) // the first start: an empty events topic, nothing to wait for
	select {
	case <-progress.seen:
		t.Fatal("the first rebuild found the history writer behind on an empty events topic")
	default:
	}

	b.record(t, b.tracker, "L")
	b.advance(3)
	sweep(t, d) // L: due t0+2
	events := b.published(t)
	if len(events) != 1 || events[0].Type != event.ConnectionLost || events[0].SensorID != "L" {
		t.Fatalf("published %+v, want L's loss", events)
	}
	// The history has L's reading but not its loss: the history writer lags.
	insertHistory(t, b.stores.ClickHouseURL, []chReading{{"L", b.t0}}, nil)
	b.flushRedis(t)
	b.advance(3.5)
	return d, reg, progress, events[0]
}

// TestRebuildWaitsForTheHistoryWriter: a loss published just before Redis lost
// its data, not yet in ClickHouse, is put back by the rebuild once the history
// writer has stored it, so the sensor's next reading restores that loss.
func TestRebuildWaitsForTheHistoryWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.cfg.RebuildHistoryWait = 2 * time.Minute // past the hang guards: the writer must catch up
	d, reg, progress, loss := lostBeforeTheFlush(t, b)

	swept := make(chan error, 1)
	go func() { swept <- d.Sweep(ctx) }() // rebuilds, waiting for the history writer
	select {
	case <-progress.seen:
	case err := <-swept:
		t.Fatalf("the sweep returned (%v) without finding the history writer behind", err)
	case <-time.After(60 * time.Second):
		t.Fatal("timed out waiting for the rebuild to find the history writer behind")
	}

	// Only now the history writer runs: it stores the loss, then commits.
	hctx, stop := context.WithCancel(ctx)
	w, err := history.New(history.Config{Stream: b.kafka}, history.NewClickHouseStore(b.stores.ClickHouse),
		prometheus.NewRegistry(), discard())
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(hctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("history writer: %v", err)
		}
	})

	select {
	case err := <-swept:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("timed out waiting for the rebuild")
	}
	if got := counter(t, reg, "lockstream_heartbeat_rebuilds_total"); got != 2 {
		t.Fatalf("rebuilds_total = %v, want 2 (start and after the flush)", got)
	}
	if got := counter(t, reg, "lockstream_heartbeat_rebuild_history_behind_total"); got != 0 {
		t.Errorf("rebuild_history_behind_total = %v, want 0: the history writer caught up", got)
	}
	if _, conn, err := b.tracker.Status(ctx, "L"); err != nil || conn != heartbeat.ConnectionLost {
		t.Fatalf("L after the rebuild: %s, %v; want lost again", conn, err)
	}
	b.advance(4)
	events := b.record(t, b.tracker, "L")
	if len(events) != 1 || events[0].Type != event.ConnectionRestored ||
		events[0].ID != event.ConnectionRestoredID("L", loss.At) {
		t.Fatalf("L's sighting emitted %+v, want the restore of its loss %s", events, loss.ID)
	}
}

// TestRebuildGoesOnWithoutTheHistoryWriter: with no history writer the rebuild
// waits RebuildHistoryWait, then rebuilds from what ClickHouse has and counts it.
func TestRebuildGoesOnWithoutTheHistoryWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.cfg.RebuildHistoryWait = 200 * time.Millisecond
	d, reg, progress, _ := lostBeforeTheFlush(t, b)

	sweep(t, d) // rebuilds after the wait
	select {
	case <-progress.seen:
	default:
		t.Fatal("the rebuild did not find the history writer behind")
	}
	if got := counter(t, reg, "lockstream_heartbeat_rebuilds_total"); got != 2 {
		t.Fatalf("rebuilds_total = %v, want 2 (start and after the flush)", got)
	}
	if got := counter(t, reg, "lockstream_heartbeat_rebuild_history_behind_total"); got != 1 {
		t.Errorf("rebuild_history_behind_total = %v, want 1", got)
	}
	// What ClickHouse has: L's reading, no loss; L gets a fresh deadline.
	if _, conn, err := b.tracker.Status(ctx, "L"); err != nil || conn != heartbeat.ConnectionOnline {
		t.Errorf("L after the rebuild: %s, %v; want online (its loss was not in the history)", conn, err)
	}
}
