package swrve

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// gate hands out turns under the rate. wait returns once a request may
// start; the request then calls written once it is written to the
// connection, or when it fails before it could be (calls after the first are
// ignored, and written is safe to call from any goroutine).
type gate interface {
	wait(ctx context.Context) (written func(), err error)
}

// pacingJitter is the jitter the limits leave room for. Requests are paced
// at (Rate-1) per (1s + pacingJitter) with a burst of one, so that any window
// of 1s + pacingJitter holds at most Rate starts. A goroutine can still wake
// late from the limiter, or stall between its turn and its write (a GC pause,
// a loaded machine), and then go out together with the ones due after it; so
// a log of the last Rate requests, each timed when it was written to the
// connection, holds back any request that would make Rate + 1 writes within
// 1s + pacingJitter (and waits for one still on its way). Swrve then sees
// more than Rate in one second only if a request is delayed between its write
// and Swrve by pacingJitter more than one written about a second later. With
// the defaults the pace is 285 requests a second: 50 ms is room for a
// request delayed on its way (the network, a busy server) by that much more
// than one written a second later; 20 ms let a fake Swrve on a loaded CI
// machine see 301 in one second.
const pacingJitter = 50 * time.Millisecond

// PacedRate is the steady rate, in requests a second, at which a Sender
// configured with rate starts requests.
func PacedRate(rate float64) float64 {
	return (rate - 1) / (1 + pacingJitter.Seconds())
}

// startLog remembers when the last n requests were written, to refuse a
// start that would make n + 1 writes within span.
type startLog struct {
	span time.Duration

	mu      sync.Mutex
	starts  []time.Time // ring, oldest at next: when each request started, then when it was written
	pending []bool      // the request started and is not written yet
	next    int
}

// writeWaitPoll is how often a start that waits for a request still on its
// way looks again. Such a request started a whole span ago, so this is rare.
const writeWaitPoll = 2 * time.Millisecond

func newStartLog(n int, span time.Duration) *startLog {
	return &startLog{span: span, starts: make([]time.Time, n), pending: make([]bool, n)}
}

// admit records a start at now and returns its ticket for written, or, if
// the start would be one too many, records nothing and returns how long to
// wait before trying again.
func (l *startLog) admit(now time.Time) (ticket int, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending[l.next] {
		// The request n starts ago has not been written yet: its write time,
		// which decides, is still to come.
		return 0, writeWaitPoll
	}
	if oldest := l.starts[l.next]; !oldest.IsZero() {
		if age := now.Sub(oldest); age < l.span {
			return 0, l.span - age
		}
	}
	ticket = l.next
	l.starts[ticket], l.pending[ticket] = now, true
	l.next = (l.next + 1) % len(l.starts)
	return ticket, 0
}

// written records that the request of ticket was written at (or failed
// before it could be) at time at; calls after the first are ignored.
func (l *startLog) written(ticket int, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending[ticket] {
		if at.After(l.starts[ticket]) {
			l.starts[ticket] = at
		}
		l.pending[ticket] = false
	}
}

// localGate keeps the rate within one process: a limiter paces the starts and
// the start log holds back one that would make Rate + 1 writes in a span.
type localGate struct {
	limiter *rate.Limiter
	starts  *startLog
}

func newLocalGate(r float64) *localGate {
	return &localGate{
		limiter: rate.NewLimiter(rate.Limit(PacedRate(r)), 1),
		starts:  newStartLog(int(r), time.Second+pacingJitter),
	}
}

func (g *localGate) wait(ctx context.Context) (func(), error) {
	if err := g.limiter.Wait(ctx); err != nil {
		return nil, err
	}
	for {
		ticket, wait := g.starts.admit(time.Now())
		if wait == 0 {
			return func() { g.starts.written(ticket, time.Now()) }, nil
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// sleep waits for d or for ctx, whichever ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
