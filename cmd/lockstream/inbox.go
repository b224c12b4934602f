package main

import (
	"context"
	"time"

	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/internal/settings"
)

// inboxPartitionsAhead is how many months of inbox partitions are kept ready
// after the current one.
const inboxPartitionsAhead = 3

// inboxPartitionsInterval is how often the partitions are checked: daily is
// plenty for months made three ahead.
const inboxPartitionsInterval = 24 * time.Hour

// inboxPartitionsBox keeps the month partitions of inbox_messages created
// ahead, so the fan-out never writes a message with no partition to hold it.
// `lockstream maintain` makes them too (and drops old months), but
// inbox_messages has no DEFAULT partition to catch a write when maintain is not
// running: the fan-out process does not depend on it. Making a partition that
// exists changes nothing.
type inboxPartitionsBox struct{}

// RegisterSettings declares nothing: the partitions' pace is fixed.
func (inboxPartitionsBox) RegisterSettings(*settings.Set) {}

func (inboxPartitionsBox) daemon(_ context.Context, n *node) (daemon, error) {
	logger := n.logger.With("daemon", "inbox-partitions")
	ensure := func(ctx context.Context) {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		names, err := inbox.NewPostgresStore(n.pg).CreateInboxPartitions(cctx, n.now(), inboxPartitionsAhead)
		if err != nil {
			if ctx.Err() == nil {
				logger.Error("creating inbox partitions failed; retrying later", "err", err)
			}
			return
		}
		logger.Debug("inbox partitions ready", "partitions", names)
	}
	return daemon{name: "inbox-partitions", run: func(ctx context.Context) error {
		ensure(ctx)
		ticker := time.NewTicker(inboxPartitionsInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-ticker.C:
				ensure(ctx)
			}
		}
	}}, nil
}
