package bridge

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/lockstream/lockstream/internal/contain"
)

// Backoff is the wait between reconnection attempts: it doubles from Min up to
// Max, with ±20 % jitter so that bridges restarted together do not reconnect in
// step. The zero value waits 100 ms to 30 s. Not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	next     time.Duration
}

// Wait sleeps for the next delay, or until ctx ends; it reports false then.
func (b *Backoff) Wait(ctx context.Context) bool {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi < lo {
		hi = max(lo, 30*time.Second)
	}
	if b.next < lo {
		b.next = lo
	}
	d := time.Duration(float64(b.next) * (0.8 + 0.4*rand.Float64()))
	b.next = min(2*b.next, hi)
	return contain.Sleep(ctx, d)
}

// Reset starts the delays from Min again, after a connection that worked.
func (b *Backoff) Reset() { b.next = 0 }
