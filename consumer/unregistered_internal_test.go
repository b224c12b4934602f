package consumer

import (
	"fmt"
	"testing"
	"time"
)

// TestSummaryKeepsHeavyHittersInBoundedSpace feeds 200,000 distinct ids once
// each and three ids many times into a summary of 100: it never holds more than
// 100 ids, the three are in it with counts within their error bounds, and an
// hour later it starts over, the ended hour waiting for its flush.
func TestSummaryKeepsHeavyHittersInBoundedSpace(t *testing.T) {
	t.Parallel()
	s := newSummary(100)
	hour := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	heavy := map[string]int64{"heavyA": 30_000, "heavyB": 20_000, "heavyC": 10_000}
	batch := map[sensorKey]seenCount{}
	for i := range 200_000 {
		batch[keyOf(fmt.Appendf(nil, "u%d", i))] = seenCount{count: 1, last: hour.UnixNano()}
		if i%1000 == 999 {
			for id, n := range heavy {
				batch[keyOf([]byte(id))] = seenCount{count: n / 200, last: hour.Add(time.Minute).UnixNano()}
			}
			s.add(hour.Add(time.Minute), batch)
			clear(batch)
			if n := len(s.h.entries); n > 100 || len(s.pos) != n {
				t.Fatalf("summary holds %d entries (%d indexed), want at most 100", n, len(s.pos))
			}
		}
	}
	_, cur := s.take()
	found := map[string]bool{}
	for _, c := range cur.counts {
		if want, ok := heavy[c.SensorID]; ok {
			found[c.SensorID] = true
			if c.Count < want || c.Count-c.CountError > want {
				t.Errorf("%s: count %d (error %d), want a bound around %d", c.SensorID, c.Count, c.CountError, want)
			}
		}
	}
	if len(found) != len(heavy) {
		t.Fatalf("heavy hitters in the summary: %v, want all of %v", found, heavy)
	}
	s.add(hour.Add(time.Hour), map[sensorKey]seenCount{keyOf([]byte("next")): {count: 1}})
	done, cur := s.take()
	if len(done) != 1 || !done[0].hour.Equal(hour) || len(done[0].counts) != 100 {
		t.Fatalf("ended hours = %d, want the 10:00 summary of 100 ids", len(done))
	}
	if len(cur.counts) != 1 || cur.counts[0].SensorID != "next" || !cur.hour.Equal(hour.Add(time.Hour)) {
		t.Fatalf("current summary = %+v, want only next at 11:00", cur)
	}
}
