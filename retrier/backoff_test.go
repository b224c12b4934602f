package retrier_test

import (
	"testing"
	"time"

	"github.com/lockstream/lockstream/retrier"
)

func half() float64 { return 0.5 }

// The numbers in Backoff's doc comment.
func TestBackoffDefaultsLandHoursNotDays(t *testing.T) {
	t.Parallel()
	want := []time.Duration{ // attempts 1..9, rounded to the second
		8*time.Minute + 28*time.Second, 10*time.Minute + 30*time.Second, 11*time.Minute + 56*time.Second,
		13*time.Minute + 3*time.Second, 13*time.Minute + 58*time.Second, 14*time.Minute + 44*time.Second,
		15*time.Minute + 24*time.Second, 15*time.Minute + 59*time.Second, 16*time.Minute + 31*time.Second,
	}
	var total, prev time.Duration
	for i, w := range want {
		attempt := i + 1
		got := retrier.Backoff(attempt, retrier.DefaultBackoffBase, retrier.DefaultBackoffMax, half)
		if got.Round(time.Second) != w {
			t.Errorf("Backoff(%d) = %s, want %s", attempt, got.Round(time.Second), w)
		}
		if got <= prev {
			t.Errorf("Backoff(%d) = %s does not grow past Backoff(%d) = %s", attempt, got, attempt-1, prev)
		}
		if nojitter := retrier.Backoff(attempt, retrier.DefaultBackoffBase, retrier.DefaultBackoffMax, nil); nojitter != got {
			t.Errorf("Backoff(%d) without rnd = %s, with rnd 0.5 = %s; want equal", attempt, nojitter, got)
		}
		prev = got
		total += got
	}
	// The 10th attempt (DefaultMaxAttempts) comes about two hours after the first.
	if total < 2*time.Hour || total > 2*time.Hour+time.Minute {
		t.Fatalf("10th attempt lands %s after the first, want 2h00m-2h01m", total)
	}
	if retrier.DefaultMaxAttempts != len(want)+1 {
		t.Fatalf("DefaultMaxAttempts = %d; the doc comment's numbers assume %d", retrier.DefaultMaxAttempts, len(want)+1)
	}
	// With the jitter at its extremes on every delay: still hours, not days.
	var low, high time.Duration
	for attempt := 1; attempt <= 9; attempt++ {
		low += retrier.Backoff(attempt, retrier.DefaultBackoffBase, retrier.DefaultBackoffMax, func() float64 { return 0 })
		high += retrier.Backoff(attempt, retrier.DefaultBackoffBase, retrier.DefaultBackoffMax, func() float64 { return 0.999999 })
	}
	if low.Round(time.Minute) != time.Hour+36*time.Minute || high.Round(time.Minute) != 2*time.Hour+25*time.Minute {
		t.Fatalf("10th attempt with extreme jitter: %s to %s, want 1h36m to 2h25m", low, high)
	}
}

func TestBackoffJitterCapAndFloor(t *testing.T) {
	t.Parallel()
	base, limit := time.Second, time.Hour
	mid := retrier.Backoff(3, base, limit, half)
	if lo := retrier.Backoff(3, base, limit, func() float64 { return 0 }); lo != time.Duration(float64(mid)*(1-retrier.Jitter)) {
		t.Errorf("lowest jitter = %s, want %s", lo, time.Duration(float64(mid)*(1-retrier.Jitter)))
	}
	if hi := retrier.Backoff(3, base, limit, func() float64 { return 0.999999 }); hi <= mid || hi > time.Duration(float64(mid)*(1+retrier.Jitter)) {
		t.Errorf("highest jitter = %s, want in (%s, %s]", hi, mid, time.Duration(float64(mid)*(1+retrier.Jitter)))
	}
	if got := retrier.Backoff(9, time.Minute, 3*time.Minute, half); got != 3*time.Minute {
		t.Errorf("Backoff(9) over the cap = %s, want the cap 3m", got)
	}
	if got, want := retrier.Backoff(0, base, limit, half), retrier.Backoff(1, base, limit, half); got != want {
		t.Errorf("Backoff(0) = %s, want Backoff(1) = %s", got, want)
	}
}

func TestRetryDelayHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	base, limit := time.Minute, time.Hour
	backoff := retrier.Backoff(2, base, limit, half)
	cases := []struct {
		retryAfter, want time.Duration
	}{
		{0, backoff},
		{time.Second, backoff},
		{30 * time.Minute, 30 * time.Minute},
		{48 * time.Hour, limit},
	}
	for _, c := range cases {
		if got := retrier.RetryDelay(2, c.retryAfter, base, limit, half); got != c.want {
			t.Errorf("RetryDelay(Retry-After %s) = %s, want %s", c.retryAfter, got, c.want)
		}
	}
}
