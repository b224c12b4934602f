package retrier

import (
	"context"
	"slices"
	"time"

	"github.com/lockstream/lockstream/storage"
)

// OutboxListener tells the retrier of new due deliveries as they are committed
// (storage.Postgres: LISTEN on storage.OutboxChannel, which the fan-out's
// transaction notifies). See Postgres.ListenOutbox for the contract.
type OutboxListener interface {
	ListenOutbox(ctx context.Context, ready func(), notice func([]storage.Channel)) error
}

// listen keeps the outbox listener open until ctx ends, listening again after
// ListenRetry when it fails. While it listens, the claim loops poll only every
// FallbackPollInterval; while it does not, every PollInterval.
func (r *Retrier) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := r.deps.Wakeups.ListenOutbox(ctx, func() {
			r.listening.Store(true)
			r.m.listening.Set(1)
			// Deliveries created while nobody listened are due now.
			r.signalWake()
		}, r.wakeLanes)
		r.listening.Store(false)
		r.m.listening.Set(0)
		if ctx.Err() != nil {
			return
		}
		r.m.errors.WithLabelValues("listen").Inc()
		r.logger.WarnContext(ctx, "listening for new deliveries failed; polling every PollInterval until listening again",
			"err", err, "in", r.cfg.ListenRetry)
		select {
		case <-ctx.Done():
		case <-time.After(r.cfg.ListenRetry):
		}
	}
}

// wakeLanes wakes the claim loop of every lane with one of channels; with
// none named, every lane.
func (r *Retrier) wakeLanes(channels []storage.Channel) {
	r.notices.Add(1)
	for _, l := range r.lanes {
		if len(channels) == 0 || slices.ContainsFunc(l.channels, func(c storage.Channel) bool { return slices.Contains(channels, c) }) {
			l.signalWake()
		}
	}
}

// Wake makes every lane look for due deliveries at once: an in-process signal
// for a fan-out running in the same process. Safe to call at any time, from
// any goroutine; it never blocks.
func (r *Retrier) Wake() { r.signalWake() }

// waitForWork blocks until the lane should look for due deliveries again: a
// wake-up (ctx ending included), or a poll tick — every tick while no listener
// is up, one every FallbackPollInterval while one is. It reports whether a poll
// ended the wait.
func (r *Retrier) waitForWork(ctx context.Context, l *lane, poll *time.Ticker, lastPoll *time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-l.wake:
			return false
		case now := <-poll.C:
			if !r.listening.Load() || now.Sub(*lastPoll) >= r.cfg.FallbackPollInterval {
				*lastPoll = now
				return true
			}
		}
	}
}
