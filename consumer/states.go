package consumer

import (
	"context"
	"time"

	"golang.org/x/sync/semaphore"
)

// stateQueue bounds the batches whose changes wait for the state writer, and
// stateQueueChanges (times MaxPollRecords, a batch's most) the changes they
// hold; a worker whose batch finds either full waits, so memory stays bounded
// while Postgres is slow.
const (
	stateQueue        = 64
	stateQueueChanges = 2
)

// stateWrite is a batch's state changes handed to the state writer: done is
// closed once they are stored, after stored ran.
type stateWrite struct {
	changes []StateChange
	stored  func()
	done    chan struct{}
}

// stateWriter stores the state changes of every partition's batches, off the
// workers' path: a worker's batch is done with its events produced, and its
// next batch does not wait for Postgres. Whatever queued up while the writer
// stored the last changes goes in one statement (up to MaxPollRecords
// changes, in the order the batches came), so the statements follow how busy
// Postgres is, not how many batches there are. A write that fails is retried
// with back-off, with nothing after it stored first.
type stateWriter struct {
	c     *Consumer
	queue chan stateWrite
	// room holds a unit per change that may wait in queue (the writer takes
	// at most 2 × MaxPollRecords more out of it: a statement's, and the batch
	// that did not fit in it).
	room *semaphore.Weighted
}

func newStateWriter(c *Consumer) *stateWriter {
	return &stateWriter{c: c, queue: make(chan stateWrite, stateQueue),
		room: semaphore.NewWeighted(int64(stateQueueChanges * c.cfg.MaxPollRecords))}
}

// run stores the queued changes until ctx is cancelled; changes not stored
// then are not marked, and are consumed again.
func (s *stateWriter) run(ctx context.Context) {
	var next *stateWrite // taken from the queue, but too big for the last statement
	for {
		first := next
		if first == nil {
			select {
			case w := <-s.queue:
				s.room.Release(int64(len(w.changes)))
				first = &w
			case <-ctx.Done():
				return
			}
		}
		var writes []stateWrite
		writes, next = s.gather(*first)
		changes := writes[0].changes
		if len(writes) > 1 {
			changes = nil
			for _, w := range writes {
				changes = append(changes, w.changes...)
			}
		}
		if err := s.store(ctx, changes); err != nil {
			return
		}
		for _, w := range writes {
			w.stored()
			close(w.done)
		}
	}
}

// gather returns first and the writes queued behind it that fit with it in
// MaxPollRecords changes (first always goes), and the write it took from the
// queue that did not fit, if any: that one leads the next statement.
func (s *stateWriter) gather(first stateWrite) (writes []stateWrite, next *stateWrite) {
	writes, n := []stateWrite{first}, len(first.changes)
	for {
		select {
		case w := <-s.queue:
			s.room.Release(int64(len(w.changes)))
			if n+len(w.changes) > s.c.cfg.MaxPollRecords {
				return writes, &w
			}
			writes, n = append(writes, w), n+len(w.changes)
		default:
			return writes, nil
		}
	}
}

// store stores changes, retrying with back-off until it succeeds or ctx is
// cancelled. An attempt in progress is not cancelled; it has its own
// deadline, BatchTimeout.
func (s *stateWriter) store(ctx context.Context, changes []StateChange) error {
	c := s.c
	backoff := c.cfg.MinBackoff
	if len(changes) == 0 {
		return nil
	}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.BatchTimeout)
		err := c.states.ApplyStateChanges(actx, changes)
		cancel()
		if err == nil {
			return nil
		}
		c.metrics.batchErrors.Inc()
		c.logger.Error("storing states failed; retrying", "changes", len(changes), "attempt", attempt,
			"retry_in", backoff, "err", err)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		backoff = min(2*backoff, c.cfg.MaxBackoff)
	}
}

// hand queues a batch's changes (at most MaxPollRecords) for the writer and
// returns what closes once they are stored (stored having run); it waits while
// the queue is full, and returns ctx's error if ctx ends first.
func (s *stateWriter) hand(ctx context.Context, changes []StateChange, stored func()) (chan struct{}, error) {
	if err := s.room.Acquire(ctx, int64(len(changes))); err != nil {
		return nil, err
	}
	w := stateWrite{changes: changes, stored: stored, done: make(chan struct{})}
	select {
	case s.queue <- w:
		return w.done, nil
	case <-ctx.Done():
		s.room.Release(int64(len(changes)))
		return nil, ctx.Err()
	}
}
