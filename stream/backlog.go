package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Backlog tells whether a consumer group has committed a topic as far as the
// topic reached at an earlier moment: take Ends, then ask Behind until it is
// empty. A group that commits a batch only once its effects are durable (the
// history writer) has then made durable every record the topic held at Ends.
// It is safe for concurrent use.
type Backlog struct {
	adm          *kadm.Client
	group, topic string
}

// NewBacklog returns a Backlog of group on topic, asking Kafka through client
// (which it does not close).
func NewBacklog(client *kgo.Client, group, topic string) (*Backlog, error) {
	var errs []error
	if client == nil {
		errs = append(errs, errors.New("stream backlog: client is nil"))
	}
	if group == "" {
		errs = append(errs, errors.New("stream backlog: group is required"))
	}
	if topic == "" {
		errs = append(errs, errors.New("stream backlog: topic is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Backlog{adm: kadm.NewClient(client), group: group, topic: topic}, nil
}

// Ends returns the end offset of each partition of the topic now (one
// ListOffsets).
func (b *Backlog) Ends(ctx context.Context) (map[int32]int64, error) {
	listed, err := b.listEnds(ctx)
	if err != nil {
		return nil, err
	}
	ends := make(map[int32]int64, len(listed[b.topic]))
	for part, o := range listed[b.topic] {
		ends[part] = o.Offset
	}
	return ends, nil
}

// Behind returns, for each partition of ends the group has not committed up to
// its end offset there, how many records before that offset it has still to
// commit; an empty map means it has committed everything the topic held at ends.
// A partition with nothing committed, or with a committed offset past the
// topic's current end (a topic created again), counts from the log start, where
// the group resumes. It costs an OffsetFetch, plus a ListOffsets or two when a
// partition has such an offset.
func (b *Backlog) Behind(ctx context.Context, ends map[int32]int64) (map[int32]int64, error) {
	committed, err := b.adm.FetchOffsets(ctx, b.group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = nil, nil // nothing committed yet
	}
	if err != nil {
		return nil, fmt.Errorf("fetching offsets committed by %s: %w", b.group, err)
	}
	behind := make(map[int32]int64)
	var current, starts kadm.ListedOffsets
	for part, end := range ends {
		at := int64(-1)
		if c, ok := committed.Lookup(b.topic, part); ok {
			if c.Err != nil {
				return nil, fmt.Errorf("fetching offset committed by %s on %s/%d: %w", b.group, b.topic, part, c.Err)
			}
			at = c.At
		}
		if at > end {
			// Past the end taken: more was committed since, unless the
			// topic was created again and the offset is stale.
			if current == nil {
				if current, err = b.listEnds(ctx); err != nil {
					return nil, err
				}
			}
			if now, ok := current.Lookup(b.topic, part); ok && at > now.Offset {
				at = -1
			}
		}
		if at < 0 {
			if starts == nil {
				if starts, err = b.adm.ListStartOffsets(ctx, b.topic); err == nil {
					err = starts.Error()
				}
				if err != nil {
					return nil, fmt.Errorf("listing start offsets of %s: %w", b.topic, err)
				}
			}
			start, ok := starts.Lookup(b.topic, part)
			if !ok {
				return nil, fmt.Errorf("listing start offsets of %s: partition %d missing", b.topic, part)
			}
			at = start.Offset
		}
		if at < end {
			behind[part] = end - at
		}
	}
	return behind, nil
}

// listEnds lists the topic's end offsets, failing when it has no partitions.
func (b *Backlog) listEnds(ctx context.Context) (kadm.ListedOffsets, error) {
	listed, err := b.adm.ListEndOffsets(ctx, b.topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("listing end offsets of %s: %w", b.topic, err)
	}
	if len(listed[b.topic]) == 0 {
		return nil, fmt.Errorf("listing end offsets of %s: no partitions", b.topic)
	}
	return listed, nil
}
