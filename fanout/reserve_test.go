package fanout

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/storage"
)

// placesHandoff grants free[i] places (at most what is asked) at the i-th
// Reserve, none after; each grant's lease ends at Unix second i+1.
type placesHandoff struct {
	mu       sync.Mutex
	free     []int
	calls    int
	capacity int
}

func (h *placesHandoff) Reserve(n int) (int, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var k int
	if h.calls < len(h.free) {
		k = min(n, h.free[h.calls])
	}
	h.calls++
	return k, time.Unix(int64(h.calls), 0)
}

func (h *placesHandoff) Release(int)                                                   {}
func (h *placesHandoff) Deliver([]storage.Delivery, map[string]storage.DeliveryTarget) {}
func (h *placesHandoff) Capacity() int                                                 { return h.capacity }
func (h *placesHandoff) SendsEmail() bool                                              { return false }

// TestReserveWaitsForAShareOfThePlaces: a transaction takes the places it
// can, waits for the sender to free 40 % of its places (or as many as it has
// events), writes only as many events as it has places for while more may
// come, and writes all that is left once the sender stalls or the deadline
// has passed.
func TestReserveWaitsForAShareOfThePlaces(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		free       []int
		n          int
		past       bool // the deadline has passed
		wantPlaces int
		wantLast   bool
		wantCalls  int
		wantUntil  int64
	}{
		{name: "places for every event", free: []int{100}, n: 100, wantPlaces: 100, wantLast: true, wantCalls: 1, wantUntil: 1},
		{name: "fewer events than the share", free: []int{50}, n: 50, wantPlaces: 50, wantLast: true, wantCalls: 1, wantUntil: 1},
		{name: "a share, over several looks", free: []int{0, 150, 0, 250, 300}, n: 1000,
			wantPlaces: 400, wantLast: false, wantCalls: 4, wantUntil: 2},
		{name: "the sender stalls", free: []int{10}, n: 1000, wantPlaces: 10, wantLast: true,
			wantCalls: 1 + int(handoffStall/handoffPoll), wantUntil: 1},
		{name: "past the deadline", free: []int{10, 500}, n: 1000, past: true, wantPlaces: 10, wantLast: true,
			wantCalls: 1, wantUntil: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := &placesHandoff{free: tc.free, capacity: 1000}
			f := &Fanout{cfg: Config{Handoff: h, HandoffWait: time.Hour, Now: time.Now}, handoffWait: prometheus.NewCounter(prometheus.CounterOpts{Name: "w"})}
			deadline := time.Now().Add(time.Hour)
			if tc.past {
				deadline = time.Now().Add(-time.Second)
			}
			r := f.reserve(context.Background(), tc.n, deadline)
			if r.places != tc.wantPlaces || r.last != tc.wantLast || h.calls != tc.wantCalls || r.until.Unix() != tc.wantUntil {
				t.Fatalf("reserve = %d places, last %v, lease to %d after %d calls; want %d, %v, %d after %d",
					r.places, r.last, r.until.Unix(), h.calls, tc.wantPlaces, tc.wantLast, tc.wantUntil, tc.wantCalls)
			}
		})
	}
	t.Run("no wait", func(t *testing.T) {
		t.Parallel()
		h := &placesHandoff{free: []int{10, 500}, capacity: 1000}
		f := &Fanout{cfg: Config{Handoff: h, Now: time.Now}}
		if r := f.reserve(context.Background(), 1000, time.Now().Add(time.Hour)); r.places != 10 || !r.last || h.calls != 1 {
			t.Fatalf("with HandoffWait 0 reserve = %+v after %d calls, want the 10 free places at once, last", r, h.calls)
		}
	})
	t.Run("no sender", func(t *testing.T) {
		t.Parallel()
		f := &Fanout{cfg: Config{Now: time.Now}}
		if r := f.reserve(context.Background(), 10, time.Now().Add(time.Hour)); r.places != 0 || !r.last {
			t.Fatalf("without a Handoff reserve = %+v, want no places, last", r)
		}
	})
}
