package consumer

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// UnregisteredStore keeps the consumer processes' summaries of the unregistered
// sensor ids they saw (PostgresStore).
type UnregisteredStore interface {
	// ReplaceUnregistered replaces the summary of (hour, process) and deletes
	// the summaries of hours before expired.
	ReplaceUnregistered(ctx context.Context, hour time.Time, process string,
		counts []UnregisteredCount, expired time.Time) error
}

// unregisteredRetention is how long hourly summaries are kept: the route sums
// the last 24 hours, and the hour it starts in.
const unregisteredRetention = 25 * time.Hour

// seenCount is how often an id was seen and when last, in Unix nanoseconds.
type seenCount struct {
	count int64
	last  int64
}

// summary is the space-saving summary (Metwally et al.) of the unregistered ids
// one consumer process saw in the current hour: at most k ids, each with a count
// that over-estimates its readings by at most its err. Any id seen more than
// 1/k of the hour's unregistered readings is in it. Memory is bounded by k
// whatever the number of distinct ids; it is shared by the process's workers.
type summary struct {
	k  int
	mu sync.Mutex
	// hour is the hour being counted; done holds the final summaries of hours
	// ended since the last flush.
	hour time.Time
	h    summaryHeap
	pos  map[sensorKey]int // an id's place in h
	done []hourSummary
}

// hourSummary is an ended hour's summary, waiting for its last flush.
type hourSummary struct {
	hour   time.Time
	counts []UnregisteredCount
}

type summaryEntry struct {
	key        sensorKey
	count, err int64
	last       int64
}

func newSummary(k int) *summary {
	s := &summary{k: k, pos: make(map[sensorKey]int, k)}
	s.h.pos = s.pos
	return s
}

// add counts a batch's unregistered ids, seen at now.
func (s *summary) add(now time.Time, seen map[sensorKey]seenCount) {
	hour := now.Truncate(time.Hour)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !hour.Equal(s.hour) {
		if len(s.h.entries) > 0 {
			s.done = append(s.done, hourSummary{hour: s.hour, counts: s.snapshotLocked()})
		}
		s.hour = hour
		s.h.entries = s.h.entries[:0]
		clear(s.pos)
	}
	for k, c := range seen {
		if i, ok := s.pos[k]; ok {
			e := &s.h.entries[i]
			e.count += c.count
			e.last = max(e.last, c.last)
			heap.Fix(&s.h, i)
			continue
		}
		if len(s.h.entries) < s.k {
			heap.Push(&s.h, summaryEntry{key: k, count: c.count, last: c.last})
			continue
		}
		// Full: the least counted id makes room, and the newcomer inherits its
		// count as the error of its own.
		least := s.h.entries[0]
		delete(s.pos, least.key)
		s.h.entries[0] = summaryEntry{key: k, count: least.count + c.count, err: least.count, last: c.last}
		s.pos[k] = 0
		heap.Fix(&s.h, 0)
	}
}

// take returns the summaries to store: the ended hours' and the current one's.
func (s *summary) take() ([]hourSummary, hourSummary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	done := s.done
	s.done = nil
	return done, hourSummary{hour: s.hour, counts: s.snapshotLocked()}
}

// putBack returns ended hours whose flush failed, to be flushed next time.
func (s *summary) putBack(done []hourSummary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = append(done, s.done...)
}

func (s *summary) snapshotLocked() []UnregisteredCount {
	out := make([]UnregisteredCount, len(s.h.entries))
	for i, e := range s.h.entries {
		out[i] = UnregisteredCount{SensorID: e.key.String(), Count: e.count, CountError: e.err,
			LastSeen: time.Unix(0, e.last).UTC()}
	}
	return out
}

// summaryHeap is a min-heap of entries by count that keeps pos up to date.
type summaryHeap struct {
	entries []summaryEntry
	pos     map[sensorKey]int
}

func (h *summaryHeap) Len() int           { return len(h.entries) }
func (h *summaryHeap) Less(i, j int) bool { return h.entries[i].count < h.entries[j].count }
func (h *summaryHeap) Swap(i, j int) {
	h.entries[i], h.entries[j] = h.entries[j], h.entries[i]
	h.pos[h.entries[i].key] = i
	h.pos[h.entries[j].key] = j
}
func (h *summaryHeap) Push(x any) {
	e := x.(summaryEntry)
	h.pos[e.key] = len(h.entries)
	h.entries = append(h.entries, e)
}
func (h *summaryHeap) Pop() any {
	e := h.entries[len(h.entries)-1]
	h.entries = h.entries[:len(h.entries)-1]
	delete(h.pos, e.key)
	return e
}

// flushUnregistered stores the summaries; ended hours that fail are kept for
// the next flush.
func (c *Consumer) flushUnregistered(ctx context.Context) {
	done, current := c.summary.take()
	expired := c.cfg.Now().Add(-unregisteredRetention)
	for i, hs := range done {
		if err := c.unregistered.ReplaceUnregistered(ctx, hs.hour, c.cfg.Process, hs.counts, expired); err != nil {
			c.metrics.unregisteredFlushErrors.Inc()
			c.logger.Warn("storing the unregistered sensors summary failed; retrying later", "err", err)
			c.summary.putBack(done[i:])
			return
		}
	}
	if len(current.counts) == 0 {
		return
	}
	if err := c.unregistered.ReplaceUnregistered(ctx, current.hour, c.cfg.Process, current.counts, expired); err != nil {
		c.metrics.unregisteredFlushErrors.Inc()
		c.logger.Warn("storing the unregistered sensors summary failed; retrying later", "err", err)
	}
}

// flushUnregisteredLoop flushes every UnregisteredFlushInterval until ctx ends.
func (c *Consumer) flushUnregisteredLoop(ctx context.Context) {
	ticker := time.NewTicker(c.cfg.UnregisteredFlushInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			fctx, cancel := context.WithTimeout(ctx, c.cfg.BatchTimeout)
			c.flushUnregistered(fctx)
			cancel()
		}
	}
}
