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

// askUntilTurn asks until the gate reserves a slot, sleeping the waits it
// answers (and then the wait until the slot), and returns the ticket and
// every wait it answered without one.
func askUntilTurn(t *testing.T, g *sharedGate) (int64, []time.Duration) {
	t.Helper()
	var waits []time.Duration
	for range 100 {
		wait, ticket, err := g.ask(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(wait) // the wait the script named, as Send does
		if ticket != 0 {
			if wait > reserveAhead {
				t.Fatalf("a slot reserved %s ahead, more than %s", wait, reserveAhead)
			}
			return ticket, waits
		}
		waits = append(waits, wait)
	}
	t.Fatalf("no turn after 100 asks: %v", waits)
	return 0, nil
}

// TestSharedGateNewServerWaitsASpan: the first slot on a server whose run id
// the state does not know (a fresh prefix, or Redis restarted and lost or
// restored its keys) is a whole span away, since the starts of the last span
// are unknown; slots are reserved at most reserveAhead ahead.
func TestSharedGateNewServerWaitsASpan(t *testing.T) {
	t.Parallel()
	r := testRedis(t)
	g, _ := newTestSharedGate(t, r, 300)
	span := time.Second + pacingJitter
	_, waits := askUntilTurn(t, g)
	if len(waits) == 0 || waits[0] != span-reserveAhead {
		t.Fatalf("first asks on a fresh state waited %v, want a span less what may be reserved ahead (%s) first",
			waits, span-reserveAhead)
	}
	// Another run id, as after a restart: a span again.
	ctx := context.Background()
	if err := r.Client().Set(ctx, g.keys[4], "another-run", 0).Err(); err != nil {
		t.Fatal(err)
	}
	wait, ticket, err := g.ask(ctx)
	if err != nil || ticket != 0 || wait != span-reserveAhead {
		t.Fatalf("ask after a new run id = %s, %d, %v; want no slot for a span", wait, ticket, err)
	}
}

// TestSharedGateCountsUnwrittenAndWrittenStarts: with a rate of 3, three
// starts fill the span: while they are unwritten the next asks poll; once
// written, the next slot comes a span after the first write (not before). A
// reservation given up is forgotten.
func TestSharedGateCountsUnwrittenAndWrittenStarts(t *testing.T) {
	t.Parallel()
	r := testRedis(t)
	g, _ := newTestSharedGate(t, r, 3)
	ctx := context.Background()
	var tickets []int64
	for range 3 {
		ticket, _ := askUntilTurn(t, g)
		tickets = append(tickets, ticket)
	}
	// The pace is 2 per span: wait it out, so that only the log decides.
	time.Sleep(time.Duration(float64(time.Second) / PacedRate(3)))
	wait, ticket, err := g.ask(ctx)
	if err != nil || ticket != 0 || wait != writeWaitPoll {
		t.Fatalf("ask with 3 unwritten starts = %s, %d, %v; want the poll %s", wait, ticket, err, writeWaitPoll)
	}
	for _, ticket := range tickets {
		g.send(ctx, ticket, false)
		g.send(ctx, ticket, false) // a second report changes nothing
	}
	written, err := r.Client().ZRangeWithScores(ctx, g.keys[1], 0, -1).Result()
	if err != nil || len(written) != 3 {
		t.Fatalf("written log = %v, %v; want 3 starts", written, err)
	}
	if n, err := r.Client().ZCard(ctx, g.keys[2]).Result(); err != nil || n != 0 {
		t.Fatalf("pending log holds %d, %v; want none", n, err)
	}
	wait, ticket, err = g.ask(ctx)
	span := time.Second + pacingJitter
	if err != nil || ticket != 0 || wait <= 0 || wait > span {
		t.Fatalf("ask with 3 written starts = %s, %d, %v; want a wait until the first write is a span old", wait, ticket, err)
	}
	time.Sleep(wait)
	ticket, _ = askUntilTurn(t, g)
	// Given up: out of the pending log, not in the written one.
	g.send(ctx, ticket, true)
	if n, err := r.Client().ZCard(ctx, g.keys[2]).Result(); err != nil || n != 0 {
		t.Fatalf("pending log holds %d, %v after the reservation was given up; want none", n, err)
	}
	if n, err := r.Client().ZCard(ctx, g.keys[1]).Result(); err != nil || n > 3 {
		t.Fatalf("written log holds %d, %v; want the reservation given up not among them", n, err)
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
