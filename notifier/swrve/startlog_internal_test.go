package swrve

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestStartLogNeverAdmitsTooMany drives the start log with bursty, jittered
// start attempts on a synthetic clock and checks that no window of
// 1s + pacingJitter holds more than n admitted starts, while starts keep
// being admitted.
func TestStartLogNeverAdmitsTooMany(t *testing.T) {
	t.Parallel()
	const n = 300
	span := time.Second + pacingJitter
	l := newStartLog(n, span)
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var admitted []time.Time
	for range 20_000 {
		// Attempts come in bursts: mostly together, sometimes after a pause.
		if rng.IntN(50) == 0 {
			now = now.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
		} else {
			now = now.Add(time.Duration(rng.IntN(3000)) * time.Microsecond)
		}
		if wait := l.admit(now); wait == 0 {
			admitted = append(admitted, now)
		} else if wait > span {
			t.Fatalf("admit asked to wait %s, longer than the span %s", wait, span)
		}
	}
	// admitted is in time order: a window is too full iff the start n places
	// back is within the span.
	for i := n; i < len(admitted); i++ {
		if d := admitted[i].Sub(admitted[i-n]); d < span {
			t.Fatalf("starts %d and %d are %s apart: %d starts within %s", i-n, i, d, n+1, span)
		}
	}
	if len(admitted) < 5*n {
		t.Fatalf("only %d starts admitted", len(admitted))
	}
}
