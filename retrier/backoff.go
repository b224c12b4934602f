package retrier

import (
	"math"
	"time"
)

// Jitter is the fraction by which Backoff spreads a delay either way, so retries
// of deliveries that failed together (a receiver's outage) do not come back
// together.
const Jitter = 0.2

// Backoff returns the delay after failed attempt number attempt (from 1) before
// the next one: base × (1 + ln(attempt+1)), spread by ±Jitter with rnd (a source
// of floats in [0, 1), such as math/rand/v2.Float64; nil means no jitter, as
// does 0.5), and capped at maxDelay.
//
// The delay grows with the logarithm of the attempt number, so it rises quickly
// from the first retry and then flattens: a receiver that is down for a while is
// neither hammered nor left waiting for days. With the defaults (base
// DefaultBackoffBase = 5m, max DefaultBackoffMax = 1h) and no jitter the delays
// after attempts 1 to 9 are
//
//	8m28s 10m30s 11m56s 13m03s 13m58s 14m44s 15m24s 15m59s 16m31s
//
// so the 10th attempt (the last one under DefaultMaxAttempts) lands about 2h00m
// after the first, between 1h36m and 2h25m with jitter: hours, not days. Attempt
// numbers below 1 count as 1.
func Backoff(attempt int, base, maxDelay time.Duration, rnd func() float64) time.Duration {
	n := float64(attempt)
	if attempt < 1 {
		n = 1
	}
	delay := float64(base) * (1 + math.Log(n+1))
	if rnd != nil {
		delay *= 1 + Jitter*(2*rnd()-1)
	}
	if delay >= float64(maxDelay) {
		return maxDelay
	}
	return time.Duration(delay)
}

// RetryDelay is the delay before the next attempt after failed attempt number
// attempt when the receiver asked for retryAfter (HTTP Retry-After; 0 if it did
// not): the longer of Backoff and retryAfter, since the receiver knows best when
// it is back, but never more than maxDelay, so no receiver parks a delivery for
// days.
func RetryDelay(attempt int, retryAfter, base, maxDelay time.Duration, rnd func() float64) time.Duration {
	return min(max(Backoff(attempt, base, maxDelay, rnd), retryAfter), maxDelay)
}
