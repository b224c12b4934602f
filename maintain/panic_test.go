package maintain_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockstream/lockstream/internal/contain"
	"github.com/lockstream/lockstream/maintain"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// panicOnce is the Postgres store, except that its first MonthPartitions
// panics (a bug in a pass).
type panicOnce struct {
	*maintain.PostgresStore
	calls atomic.Int64
}

func (p *panicOnce) MonthPartitions(ctx context.Context, table string) ([]storage.MonthPartition, error) {
	if p.calls.Add(1) == 1 {
		panic("a bug in the pass")
	}
	return p.PostgresStore.MonthPartitions(ctx, table)
}

// TestRunGoesOnAfterAPanic: a pass that panics is counted in
// lockstream_panics_total{where="maintain"} and as a failed pass; the next
// pass runs and makes the partitions.
func TestRunGoesOnAfterAPanic(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	store := &panicOnce{PostgresStore: maintain.NewPostgresStore(stores.Postgres)}
	reg := prometheus.NewRegistry()
	mt, err := maintain.New(maintain.Config{Interval: 10 * time.Millisecond}, store, nil, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mt.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	}()
	panics, err := contain.Counter(reg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		parts, err := stores.Postgres.MonthPartitions(context.Background(), "deliveries")
		if err != nil {
			t.Fatal(err)
		}
		if len(parts) > 0 && store.calls.Load() > 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pass made partitions after the panic (%d calls)", store.calls.Load())
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	if got := testutil.ToFloat64(panics.WithLabelValues("maintain")); got != 1 {
		t.Errorf("panics_total{where=maintain} = %v, want 1", got)
	}
}
