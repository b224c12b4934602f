package analytics

import (
	"fmt"
	"time"
)

// Bucket is the width of a summary's buckets.
type Bucket string

// The buckets a summary can be cut into. Each starts where a clock in the
// summary's time zone shows a multiple of it: minutes and hours on the
// minute and hour, days at local midnight (so a DST day lasts 23 or 25
// hours), weeks on Monday at midnight, months on the 1st at midnight.
const (
	Bucket1m  Bucket = "1m"
	Bucket5m  Bucket = "5m"
	Bucket15m Bucket = "15m"
	Bucket1h  Bucket = "1h"
	Bucket1d  Bucket = "1d"
	Bucket1w  Bucket = "1w"
	Bucket1mo Bucket = "1mo"
)

// MaxBuckets bounds one summary's buckets (a year of 5-minute buckets fits).
const MaxBuckets = 110_000

// ParseBucket reads one of the buckets.
func ParseBucket(raw string) (Bucket, error) {
	switch b := Bucket(raw); b {
	case Bucket1m, Bucket5m, Bucket15m, Bucket1h, Bucket1d, Bucket1w, Bucket1mo:
		return b, nil
	}
	return "", fmt.Errorf("bucket must be 1m, 5m, 15m, 1h, 1d, 1w or 1mo, got %q", raw)
}

// clockStep is the bucket's width in seconds for buckets shorter than a day.
func (b Bucket) clockStep() int64 {
	switch b {
	case Bucket1m:
		return 60
	case Bucket5m:
		return 300
	case Bucket15m:
		return 900
	case Bucket1h:
		return 3600
	}
	return 0
}

// Edges returns the edges of the buckets that cover [from, to) in loc: from,
// every bucket start strictly between from and to, then to. The first and
// last buckets are thereby clipped to the range. It fails when the range
// makes more than MaxBuckets buckets.
func Edges(b Bucket, loc *time.Location, from, to time.Time) ([]time.Time, error) {
	edges := []time.Time{from}
	for t := nextEdge(b, loc, from); t.Before(to); t = nextEdge(b, loc, t) {
		if len(edges) > MaxBuckets {
			return nil, fmt.Errorf("bucket %s makes more than %d buckets from %s to %s", b, MaxBuckets,
				from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
		}
		edges = append(edges, t)
	}
	return append(edges, to), nil
}

// nextEdge returns the first bucket start strictly after t.
func nextEdge(b Bucket, loc *time.Location, t time.Time) time.Time {
	local := t.In(loc)
	y, m, d := local.Date()
	switch b {
	case Bucket1d:
		return nextDate(t, func(n int) time.Time { return time.Date(y, m, d+n, 0, 0, 0, 0, loc) })
	case Bucket1w:
		back := (int(local.Weekday()) + 6) % 7 // days since Monday
		return nextDate(t, func(n int) time.Time { return time.Date(y, m, d-back+7*n, 0, 0, 0, 0, loc) })
	case Bucket1mo:
		return nextDate(t, func(n int) time.Time { return time.Date(y, m+time.Month(n), 1, 0, 0, 0, 0, loc) })
	}
	return nextClockEdge(b.clockStep(), local)
}

// nextDate returns the first of at(0), at(1), … after t. time.Date picks a
// wall time that a DST change skips or repeats consistently, which is all
// day, week and month starts need.
func nextDate(t time.Time, at func(n int) time.Time) time.Time {
	for n := 0; ; n++ {
		if e := at(n); e.After(t) {
			return e
		}
	}
}

// nextClockEdge returns the first instant after t at which the local clock
// shows a multiple of step seconds. Within one zone period (between two
// offset changes) these are evenly spaced; an offset change starts a new
// period, whose first edge is found the same way.
func nextClockEdge(step int64, t time.Time) time.Time {
	for {
		_, off := t.Zone()
		next := time.Unix((floorDiv(t.Unix()+int64(off), step)+1)*step-int64(off), 0)
		_, end := t.ZoneBounds()
		if end.IsZero() || next.Before(end) || next.Equal(end) {
			return next.In(t.Location())
		}
		// The offset changes first: is the change itself an edge?
		start := end.In(t.Location())
		_, off2 := start.Zone()
		if floorDiv(start.Unix()+int64(off2), step)*step == start.Unix()+int64(off2) {
			return start
		}
		t = start
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
