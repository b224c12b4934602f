package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
)

// TailEvents calls fn, in each partition's order, with every event appended to the
// events topic from since on, until ctx ends; it then returns nil. It reads without
// a consumer group and commits nothing: a live view, not a processing step. Records
// that do not decode as events are skipped. A fetch error other than ctx's end is
// returned, so the caller can start again.
func TailEvents(ctx context.Context, cfg Config, since time.Time, logger *slog.Logger, fn func(event.Event)) error {
	opts := append(ClientOpts(cfg),
		kgo.ConsumeTopics(cfg.EventsTopic()),
		// From a point in time rather than the end: an event appended while the
		// client looks up its partitions is not lost.
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(since.UnixMilli())),
		WithLogger(logger),
	)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("tailing events: %w", err)
	}
	defer client.Close()
	for {
		fetches := client.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var fetchErr error
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) {
				fetchErr = errors.Join(fetchErr, fmt.Errorf("tailing %s/%d: %w", topic, partition, err))
			}
		})
		if fetchErr != nil {
			return fetchErr
		}
		fetches.EachRecord(func(r *kgo.Record) {
			e, err := event.Decode(r.Value)
			if err != nil {
				logger.Debug("tail: skipping a record that is not an event", "partition", r.Partition, "offset", r.Offset, "err", err)
				return
			}
			fn(e)
		})
	}
}
