package fanout

import (
	"context"
	"time"
)

// InboxPartitionsAhead is how many months of inbox_messages partitions the
// fan-out keeps made after the current one.
const InboxPartitionsAhead = 3

// InboxPartitionsInterval is how often the fan-out makes the inbox partitions
// ahead: daily is plenty for months made three ahead.
const InboxPartitionsInterval = 24 * time.Hour

// inboxPartitionsRetry is the wait before a failed making of the inbox
// partitions is tried again.
const inboxPartitionsRetry = time.Minute

// InboxPartitions makes the month partitions of inbox_messages
// (PostgresStore, inbox.PostgresStore).
type InboxPartitions interface {
	// CreateInboxPartitions makes sure inbox_messages has its month
	// partitions from the month of from to months later, and returns their
	// names; making one that exists changes nothing.
	CreateInboxPartitions(ctx context.Context, from time.Time, months int) ([]string, error)
}

// createInboxPartitions makes the inbox partitions of this month and the
// InboxPartitionsAhead after it, and returns how long to wait before making
// them again: InboxPartitionsInterval, or inboxPartitionsRetry when it failed
// (the error is logged).
func (f *Fanout) createInboxPartitions(ctx context.Context) time.Duration {
	cctx, cancel := context.WithTimeout(ctx, f.cfg.WriteTimeout)
	defer cancel()
	names, err := f.store.CreateInboxPartitions(cctx, f.cfg.Now(), InboxPartitionsAhead)
	if err != nil {
		if ctx.Err() == nil {
			f.logger.ErrorContext(ctx, "creating inbox partitions failed; retrying later",
				"retry_in", inboxPartitionsRetry, "err", err)
		}
		return inboxPartitionsRetry
	}
	f.logger.DebugContext(ctx, "inbox partitions ready", "partitions", names)
	return InboxPartitionsInterval
}

// inboxPartitionsLoop makes the inbox partitions again after wait, and then
// as often as createInboxPartitions says, until ctx is cancelled.
func (f *Fanout) inboxPartitionsLoop(ctx context.Context, wait time.Duration) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			timer.Reset(f.createInboxPartitions(ctx))
		}
	}
}
