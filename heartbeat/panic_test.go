package heartbeat_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/internal/contain"
)

// panicOnce is the Redis store, except that the first sweep's first call
// panics (a bug in a sweep); swept is closed when a later sweep reads the
// marker.
type panicOnce struct {
	*heartbeat.RedisStore
	calls atomic.Int64
	once  sync.Once
	swept chan struct{}
}

func (p *panicOnce) HeartbeatMarker(ctx context.Context) (bool, error) {
	if p.calls.Add(1) == 1 {
		panic("a bug in the sweep")
	}
	built, err := p.RedisStore.HeartbeatMarker(ctx)
	if err == nil {
		p.once.Do(func() { close(p.swept) })
	}
	return built, err
}

// TestRunGoesOnAfterASweepPanics: a sweep that panics is counted in
// lockstream_panics_total{where="heartbeat_sweep"} and as a failed sweep;
// Run goes on with the next.
func TestRunGoesOnAfterASweepPanics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	store := &panicOnce{RedisStore: b.hb.Redis, swept: make(chan struct{})}
	reg := prometheus.NewRegistry()
	d, err := heartbeat.New(b.cfg, heartbeat.Deps{
		Store: store, Registry: b.hb.Postgres, History: b.hb.ClickHouse, Publisher: b.publisher(t),
	}, reg, discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case <-store.swept:
	case err := <-done:
		t.Fatalf("Run returned %v before a sweep after the panic", err)
	case <-time.After(time.Minute):
		t.Fatalf("no sweep after the panic (%d calls)", store.calls.Load())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	panics, err := contain.Counter(reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(panics.WithLabelValues("heartbeat_sweep")); got != 1 {
		t.Errorf("panics_total{where=heartbeat_sweep} = %v, want 1", got)
	}
}
