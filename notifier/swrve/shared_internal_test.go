package swrve

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// testRedis opens a Redis of the test's own prefix.
func testRedis(t *testing.T) *storage.Redis {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := storage.OpenRedis(ctx, storagetest.RedisURL(t), storagetest.NewRedisPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func newTestSharedGate(t *testing.T, r *storage.Redis, rate float64) (*sharedGate, prometheus.Counter) {
	t.Helper()
	errs := prometheus.NewCounter(prometheus.CounterOpts{Name: "errors"})
	return newSharedGate(r, Config{Rate: rate}.WithDefaults(), errs, slog.New(slog.DiscardHandler)), errs
}

// askUntilTurn asks until the gate gives a turn, sleeping the waits it
// answers, and returns the ticket and every wait it answered.
func askUntilTurn(t *testing.T, g *sharedGate) (int64, []time.Duration) {
	t.Helper()
	var waits []time.Duration
	for range 100 {
		wait, ticket, err := g.ask(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if wait == 0 {
			return ticket, waits
		}
		waits = append(waits, wait)
		time.Sleep(wait) // the wait the script named, as Send does
	}
	t.Fatalf("no turn after 100 asks: %v", waits)
	return 0, nil
}

// TestSharedGateNewServerWaitsASpan: the first turn on a server whose run id
// the state does not know (a fresh prefix, or Redis restarted and lost or
// restored its keys) waits a whole span, since the starts of the last span
// are unknown; the turns after it are paced.
func TestSharedGateNewServerWaitsASpan(t *testing.T) {
	t.Parallel()
	r := testRedis(t)
	g, _ := newTestSharedGate(t, r, 300)
	span := time.Second + pacingJitter
	_, waits := askUntilTurn(t, g)
	if len(waits) == 0 || waits[0] != span {
		t.Fatalf("first asks on a fresh state waited %v, want a span (%s) first", waits, span)
	}
	// Another run id, as after a restart: a span again.
	ctx := context.Background()
	if err := r.Client().Set(ctx, g.keys[4], "another-run", 0).Err(); err != nil {
		t.Fatal(err)
	}
	wait, _, err := g.ask(ctx)
	if err != nil || wait != span {
		t.Fatalf("ask after a new run id = %s, %v; want a span (%s)", wait, err, span)
	}
}

// TestSharedGateCountsUnwrittenAndWrittenStarts: with a rate of 3, three
// starts fill the span: while they are unwritten the next asks poll; once
// written, the next turn comes a span after the first write (not before).
func TestSharedGateCountsUnwrittenAndWrittenStarts(t *testing.T) {
	t.Parallel()
	r := testRedis(t)
	g, _ := newTestSharedGate(t, r, 3)
	var reports []func()
	for range 3 {
		ticket, _ := askUntilTurn(t, g)
		reports = append(reports, g.written(context.Background(), ticket))
	}
	// The pace is 2 per span: wait it out, so that only the log decides.
	time.Sleep(time.Duration(float64(time.Second) / PacedRate(3)))
	wait, _, err := g.ask(context.Background())
	if err != nil || wait != writeWaitPoll {
		t.Fatalf("ask with 3 unwritten starts = %s, %v; want the poll %s", wait, err, writeWaitPoll)
	}
	for _, w := range reports {
		w()
		w() // a second report changes nothing
	}
	written, err := r.Client().ZRangeWithScores(context.Background(), g.keys[1], 0, -1).Result()
	if err != nil || len(written) != 3 {
		t.Fatalf("written log = %v, %v; want 3 starts", written, err)
	}
	if n, err := r.Client().ZCard(context.Background(), g.keys[2]).Result(); err != nil || n != 0 {
		t.Fatalf("pending log holds %d, %v; want none", n, err)
	}
	wait, _, err = g.ask(context.Background())
	span := time.Second + pacingJitter
	if err != nil || wait <= 0 || wait > span {
		t.Fatalf("ask with 3 written starts = %s, %v; want a wait until the first write is a span old", wait, err)
	}
	time.Sleep(wait)
	if wait, _, err = g.ask(context.Background()); err != nil || wait != 0 {
		t.Fatalf("ask a span after the first write = %s, %v; want a turn", wait, err)
	}
}

// TestSharedGateWaitsWhileRedisFails: with Redis unreachable a send waits for
// its turn until ctx ends, then says why, counting the failures.
func TestSharedGateWaitsWhileRedisFails(t *testing.T) {
	t.Parallel()
	r := testRedis(t)
	g, errs := newTestSharedGate(t, r, 300)
	_ = r.Close() // every call fails from now on
	ctx, cancel := context.WithTimeout(context.Background(), 3*sharedRetry)
	defer cancel()
	_, err := g.wait(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Redis") {
		t.Fatalf("wait with Redis closed = %v, want the deadline naming Redis' error", err)
	}
	if n := testutil.ToFloat64(errs); n < 2 {
		t.Errorf("%v Redis errors counted, want one per ask (at least 2)", n)
	}
}
