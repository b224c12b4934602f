package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
)

// TailEvents calls fn, in each partition's order, with every event appended to the
// events topic from since on, until ctx ends; it then returns nil. It reads without
// a consumer group and commits nothing: a live view, not a processing step. Records
// that do not decode as events are skipped. A fetch error other than ctx's end, or
// an events topic that does not exist yet, is returned, so the caller can start
// again.
func TailEvents(ctx context.Context, cfg Config, since time.Time, logger *slog.Logger, fn func(event.Event)) error {
	starts, err := tailStarts(ctx, cfg, since, logger)
	if err != nil {
		return err
	}
	opts := append(ClientOpts(cfg),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.EventsTopic(): starts}),
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

// tailStarts finds, for each partition of the events topic, the offset from which
// the tail reads: the first record stamped at or after since, or, when there is
// none, the end offset listed *before* that lookup. franz-go's own AfterMilli
// (and kadm's) take the end offset listed after the lookup when it finds no
// record, so an event appended between the two requests was skipped (the console's
// live view missed its first event that way, under load).
func tailStarts(ctx context.Context, cfg Config, since time.Time, logger *slog.Logger) (map[int32]kgo.Offset, error) {
	topic := cfg.EventsTopic()
	client, err := kgo.NewClient(append(ClientOpts(cfg), WithLogger(logger))...)
	if err != nil {
		return nil, fmt.Errorf("tailing events: %w", err)
	}
	defer client.Close()
	adm := kadm.NewClient(client)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("tailing events: listing the end offsets of %s: %w", topic, err)
	}
	afters, err := adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic)
	if err == nil {
		err = afters.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("tailing events: listing the offsets of %s after %s: %w", topic, since, err)
	}
	starts := make(map[int32]kgo.Offset, len(ends[topic]))
	for part, end := range ends[topic] {
		at := end.Offset
		if after, ok := afters.Lookup(topic, part); ok && after.Offset >= 0 && after.Offset < at {
			at = after.Offset
		}
		starts[part] = kgo.NewOffset().At(at)
	}
	if len(starts) == 0 {
		return nil, fmt.Errorf("tailing events: %s has no partitions", topic)
	}
	return starts, nil
}
