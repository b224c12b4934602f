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
		if ticket, wait := l.admit(now); wait == 0 {
			l.written(ticket, now)
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

// TestStartLogTimesWrites: a request that stalls between its turn and its
// write counts from its write. Later starts are held back until n writes
// are a span apart, and one that would follow a request still unwritten
// waits for it.
func TestStartLogTimesWrites(t *testing.T) {
	t.Parallel()
	const n = 3
	span := time.Second
	l := newStartLog(n, span)
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var tickets []int
	for i := range n {
		ticket, wait := l.admit(t0.Add(time.Duration(i) * time.Millisecond))
		if wait != 0 {
			t.Fatalf("start %d waits %s in an empty log", i, wait)
		}
		tickets = append(tickets, ticket)
	}
	// The first request is still on its way a span later: the next start
	// waits for it rather than counting from when it started.
	if _, wait := l.admit(t0.Add(span + time.Millisecond)); wait != writeWaitPoll {
		t.Fatalf("start after an unwritten one: wait %s, want %s", wait, writeWaitPoll)
	}
	// It is written 400 ms late; the others on time.
	l.written(tickets[0], t0.Add(400*time.Millisecond))
	l.written(tickets[1], t0.Add(time.Millisecond))
	l.written(tickets[2], t0.Add(2*time.Millisecond))
	l.written(tickets[0], t0) // a second report of the same ticket changes nothing
	now := t0.Add(span + time.Millisecond)
	if _, wait := l.admit(now); wait != t0.Add(400*time.Millisecond+span).Sub(now) {
		t.Fatalf("start a span after the late one started: wait %s, want until a span after its write", wait)
	}
	if _, wait := l.admit(t0.Add(400*time.Millisecond + span)); wait != 0 {
		t.Fatalf("start a span after the late write: wait %s, want none", wait)
	}
}
