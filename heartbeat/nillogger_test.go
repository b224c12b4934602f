package heartbeat_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/storage"
)

// TestNilLoggerDaemon builds a daemon with a nil logger and has it publish a loss,
// which it logs.
func TestNilLoggerDaemon(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.newDaemonWith(t, nil, nil)
	b.record(t, b.tracker, "quiet")
	b.advance(4) // quiet was due at t0+3
	sweep(t, d)
	if got := ofType(b.published(t), event.ConnectionLost); len(got) != 1 || got["quiet"] != 1 {
		t.Fatalf("losses published = %v, want quiet's", got)
	}
}

// TestNilLoggerTracker builds a tracker with a nil logger and has a timeout reload
// fail, which it logs and outlives with the timeouts loaded before.
func TestNilLoggerTracker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// A Postgres store of its own, closed after the first load, makes the reload fail.
	pg, err := storage.OpenPostgres(ctx, b.stores.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	tr := b.newTrackerWith(t, heartbeat.NewPostgresStore(pg), prometheus.NewRegistry(), nil)
	b.record(t, tr, "a")
	pg.Close()
	if _, err := heartbeat.NewPostgresStore(pg).HeartbeatTimeouts(ctx); err == nil {
		t.Fatal("a closed Postgres store loaded timeouts; the reload below would not fail")
	}
	b.clock.Set(b.clock.Now().Add(b.cfg.WithDefaults().TimeoutRefresh + time.Second))
	if _, err := tr.Record(ctx, map[string]time.Time{"a": b.clock.Now()}); err != nil {
		t.Fatalf("Record after a failed timeout reload = %v, want the timeouts loaded before kept", err)
	}
}
