package notifier_test

import (
	"testing"
	"time"

	"github.com/lockstream/lockstream/notifier"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-5", 0},
		{"30", 30 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"Sun, 22 Nov 2026 10:01:30 GMT", 90 * time.Second},
		{"Sunday, 22-Nov-26 10:00:10 GMT", 10 * time.Second}, // RFC 850
		{"Sun Nov 22 10:00:05 2026", 5 * time.Second},        // asctime
		{"Sun, 22 Nov 2026 09:00:00 GMT", 0},                 // in the past
		{"soon", 0},
		{"99999999999999999", 100 * 365 * 24 * time.Hour},
	} {
		if got := notifier.ParseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("notifier.ParseRetryAfter(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
