package escalation_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockstream/lockstream/escalation"
	"github.com/lockstream/lockstream/internal/contain"
)

// panicOnce is the Postgres store, except that its first round panics (a bug
// in a round); ran is closed when a later round returns without an error.
type panicOnce struct {
	*escalation.PostgresStore
	calls atomic.Int64
	once  sync.Once
	ran   chan struct{}
}

func (p *panicOnce) RunRound(ctx context.Context, r escalation.Round) (escalation.Result, error) {
	if p.calls.Add(1) == 1 {
		panic("a bug in the round")
	}
	res, err := p.PostgresStore.RunRound(ctx, r)
	if err == nil {
		p.once.Do(func() { close(p.ran) })
	}
	return res, err
}

// TestRunGoesOnAfterAPanic: a round that panics is counted in
// lockstream_panics_total{where="escalation"}; Run goes on with the next.
func TestRunGoesOnAfterAPanic(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	store := &panicOnce{PostgresStore: escalation.NewPostgresStore(f.pg), ran: make(chan struct{})}
	reg := prometheus.NewRegistry()
	e, err := escalation.New(escalation.Config{Interval: 10 * time.Millisecond}, store, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	select {
	case <-store.ran:
	case err := <-done:
		t.Fatalf("Run returned %v before a round after the panic", err)
	case <-time.After(time.Minute):
		t.Fatalf("no round ran after the panic (%d calls)", store.calls.Load())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	panics, err := contain.Counter(reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(panics.WithLabelValues("escalation")); got != 1 {
		t.Errorf("panics_total{where=escalation} = %v, want 1", got)
	}
}
