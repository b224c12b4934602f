package stream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultProgressRefetch is the default of ProgressConfig.Refetch.
const DefaultProgressRefetch = 5 * time.Second

// ProgressConfig configures a Progress.
type ProgressConfig struct {
	// Stream names the cluster and the readings topic. Required.
	Stream Config
	// Group is the consumer group whose progress is measured: the state
	// consumer's (consumer.DefaultGroup). Required.
	Group string
	// Refetch is how long a partition's known first unconsumed record may stand
	// in for a later one after the group committed past it, before that later
	// record is read. The stand-in is older, so the watermark it gives is only
	// more cautious; the limit caps reads at one record per partition per
	// Refetch, however often Watermark is called. Defaults to
	// DefaultProgressRefetch (5s, the consumer's commit interval).
	Refetch time.Duration
}

// Progress tells how far a consumer group has got through the readings topic, in
// record time: its watermark is a time before which every record of every
// partition has been consumed and committed. It is safe for concurrent use.
//
// A partition whose committed offset is at its end offset is caught up; otherwise
// its watermark is the timestamp of the first record the group has not committed
// (at the committed offset, or at the log start when nothing is committed or the
// committed offset is out of range, as the consumer resumes there). On Kafka the
// readings topic stamps records with the broker's clock (LogAppendTime), so
// timestamps grow with offsets within a partition and every earlier record is
// consumed.
type Progress struct {
	cfg    ProgressConfig
	client *kgo.Client
	adm    *kadm.Client
	logger *slog.Logger

	mu      sync.Mutex // one computation at a time; guards what follows
	leaders map[int32]int32
	topicID [16]byte
	known   map[int32]firstRecord
}

// firstRecord is what Progress knows about a partition's first unconsumed record.
type firstRecord struct {
	offset  int64
	at      time.Time
	fetched time.Time // when it was read, by the caller's clock
}

// NewProgress returns a Progress that asks Kafka through client (which it does
// not close). A nil logger discards.
func NewProgress(cfg ProgressConfig, client *kgo.Client, logger *slog.Logger) (*Progress, error) {
	cfg.Refetch = cmp.Or(cfg.Refetch, DefaultProgressRefetch)
	var errs []error
	if cfg.Group == "" {
		errs = append(errs, errors.New("stream progress: Group is required"))
	}
	if cfg.Refetch < 0 {
		errs = append(errs, fmt.Errorf("stream progress: Refetch %s is negative", cfg.Refetch))
	}
	if client == nil {
		errs = append(errs, errors.New("stream progress: client is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Progress{cfg: cfg, client: client, adm: kadm.NewClient(client), logger: logger,
		known: make(map[int32]firstRecord)}, nil
}

// Watermark returns how far the group has consumed the readings topic: now when
// every partition is caught up, else the earliest timestamp of a first unconsumed
// record, never later than now. It costs an offset fetch and a list of end offsets
// per call, plus one small fetch per lagging partition whose committed offset
// moved (at most one per partition per Refetch). An error means the watermark is
// unknown: callers must not act as if consumption had caught up.
func (p *Progress) Watermark(ctx context.Context, now time.Time) (time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	resume, err := p.resumeOffsets(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("measuring progress of group %s: %w", p.cfg.Group, err)
	}
	mark := now
	var fetch []partitionOffset
	for part, off := range resume {
		if off < 0 {
			delete(p.known, part) // caught up
			continue
		}
		k, ok := p.known[part]
		if ok && (k.offset == off || (k.offset < off && now.Sub(k.fetched) < p.cfg.Refetch)) {
			mark = earliest(mark, k.at)
			continue
		}
		fetch = append(fetch, partitionOffset{part, off})
	}
	for _, po := range fetch {
		at, err := p.recordTime(ctx, po.partition, po.offset)
		if err != nil {
			return time.Time{}, fmt.Errorf("measuring progress of group %s: %w", p.cfg.Group, err)
		}
		p.known[po.partition] = firstRecord{offset: po.offset, at: at, fetched: now}
		mark = earliest(mark, at)
	}
	return mark, nil
}

type partitionOffset struct {
	partition int32
	offset    int64
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// resumeOffsets returns, for each partition of the readings topic, the offset the
// group resumes from, or -1 when the partition is caught up.
func (p *Progress) resumeOffsets(ctx context.Context) (map[int32]int64, error) {
	topic := p.cfg.Stream.ReadingsTopic()
	committed, err := p.adm.FetchOffsets(ctx, p.cfg.Group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = nil, nil // nothing committed yet
	}
	if err != nil {
		return nil, fmt.Errorf("fetching committed offsets: %w", err)
	}
	ends, err := p.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("listing end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("listing end offsets of %s: %w", topic, err)
	}
	if len(ends[topic]) == 0 {
		return nil, fmt.Errorf("listing end offsets of %s: no partitions", topic)
	}
	resume := make(map[int32]int64, len(ends[topic]))
	var starts kadm.ListedOffsets
	for part, end := range ends[topic] {
		at := int64(-1)
		if c, ok := committed.Lookup(topic, part); ok {
			if c.Err != nil {
				return nil, fmt.Errorf("fetching committed offset of %s/%d: %w", topic, part, c.Err)
			}
			at = c.At
		}
		if at >= 0 && at == end.Offset {
			resume[part] = -1
			continue
		}
		if at < 0 || at > end.Offset {
			// Nothing committed, or an offset past the end (a recreated
			// topic): the consumer starts from the log start.
			if starts == nil {
				if starts, err = p.adm.ListStartOffsets(ctx, topic); err == nil {
					err = starts.Error()
				}
				if err != nil {
					return nil, fmt.Errorf("listing start offsets of %s: %w", topic, err)
				}
			}
			start, ok := starts.Lookup(topic, part)
			if !ok {
				return nil, fmt.Errorf("listing start offsets of %s: partition %d missing", topic, part)
			}
			at = start.Offset
		}
		if at >= end.Offset {
			resume[part] = -1
		} else {
			resume[part] = at
		}
	}
	return resume, nil
}

// recordTime reads the timestamp of the first record at or after offset in
// partition. A committed offset below the log start (records deleted by retention)
// is read from the log start, where the consumer resumes.
func (p *Progress) recordTime(ctx context.Context, partition int32, offset int64) (time.Time, error) {
	at, logStart, err := p.fetchFirst(ctx, partition, offset)
	if errors.Is(err, kerr.OffsetOutOfRange) && logStart > offset {
		at, _, err = p.fetchFirst(ctx, partition, logStart)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("reading %s/%d at %d: %w", p.cfg.Stream.ReadingsTopic(), partition, offset, err)
	}
	return at, nil
}

// fetchFirst fetches one batch of partition from its leader, starting at offset,
// and returns the timestamp of its first record at or after offset, and the
// partition's log start offset as the leader reported it.
func (p *Progress) fetchFirst(ctx context.Context, partition int32, offset int64) (time.Time, int64, error) {
	topic := p.cfg.Stream.ReadingsTopic()
	leader, err := p.leader(ctx, partition)
	if err != nil {
		return time.Time{}, -1, err
	}
	req := kmsg.NewPtrFetchRequest()
	// Limits of one byte still return the first batch whatever its size
	// (KIP-74), and nothing more.
	req.MaxBytes = 1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, p.topicID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, 1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, p.client.Broker(int(leader)))
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		p.leaders = nil // perhaps the leader moved
		return time.Time{}, -1, err
	}
	for _, t := range resp.Topics {
		for i := range t.Partitions {
			part := &t.Partitions[i]
			if part.Partition != partition {
				continue
			}
			fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
				Offset: offset, Topic: topic, Partition: partition,
			}, part, kgo.DefaultDecompressor(), nil)
			if fp.Err != nil {
				p.leaders = nil
				return time.Time{}, part.LogStartOffset, fp.Err
			}
			if len(fp.Records) == 0 {
				return time.Time{}, part.LogStartOffset, fmt.Errorf("no record below the end offset %d", part.HighWatermark)
			}
			return fp.Records[0].Timestamp, part.LogStartOffset, nil
		}
	}
	return time.Time{}, -1, errors.New("partition missing from the answer")
}

// leader returns partition's leader broker, from cached metadata; a failed read
// drops the cache so the next call asks again.
func (p *Progress) leader(ctx context.Context, partition int32) (int32, error) {
	topic := p.cfg.Stream.ReadingsTopic()
	if p.leaders == nil {
		meta, err := p.adm.Metadata(ctx, topic)
		if err != nil {
			return 0, fmt.Errorf("reading metadata of %s: %w", topic, err)
		}
		td, ok := meta.Topics[topic]
		if !ok {
			return 0, fmt.Errorf("reading metadata of %s: topic missing", topic)
		}
		if td.Err != nil {
			return 0, fmt.Errorf("reading metadata of %s: %w", topic, td.Err)
		}
		p.leaders = make(map[int32]int32, len(td.Partitions))
		for part, pd := range td.Partitions {
			p.leaders[part] = pd.Leader
		}
		p.topicID = td.ID
	}
	leader, ok := p.leaders[partition]
	if !ok || leader < 0 {
		p.leaders = nil
		return 0, fmt.Errorf("partition %s/%d has no leader", topic, partition)
	}
	return leader, nil
}
