package domain_test

import (
	"testing"
	"time"

	"github.com/lockstream/lockstream/domain"
)

// Quiet hours are read on the member's wall clock: a window within a day, one
// spanning midnight (before and after it), outside them, and a zone with its
// own offset.
func TestQuietUntil(t *testing.T) {
	t.Parallel()
	utc := func(h, m int) time.Time { return time.Date(2026, 11, 22, h, m, 0, 0, time.UTC) }
	night := domain.QuietHours{From: "22:00", To: "07:00"}
	lunch := domain.QuietHours{From: "12:00", To: "13:30"}
	for _, tc := range []struct {
		now   time.Time
		q     domain.QuietHours
		tz    string
		quiet bool
		until time.Time
	}{
		{utc(23, 10), night, "UTC", true, time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)},
		{utc(3, 0), night, "UTC", true, utc(7, 0)},
		{utc(7, 0), night, "UTC", false, time.Time{}},
		{utc(21, 59), night, "UTC", false, time.Time{}},
		{utc(12, 0), lunch, "UTC", true, utc(13, 30)},
		{utc(13, 30), lunch, "UTC", false, time.Time{}},
		// 21:30 UTC is 22:30 in Paris (UTC+1 in November): quiet until 07:00 Paris.
		{utc(21, 30), night, "Europe/Paris", true, time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)},
		{utc(21, 30), night, "Nowhere/Land", false, time.Time{}}, // unknown zone: UTC
	} {
		until, quiet := domain.QuietUntil(tc.now, tc.q, tc.tz)
		if quiet != tc.quiet || !until.Equal(tc.until) {
			t.Errorf("QuietUntil(%v, %v, %s) = %v, %v; want %v, %v", tc.now, tc.q, tc.tz, until, quiet, tc.until, tc.quiet)
		}
	}
}
