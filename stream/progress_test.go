package stream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

const progressGroup = "lockstream-state-test"

// progressWorld is a readings topic of two partitions with records of known
// timestamps, and a way to commit the group's offsets as the consumer would.
type progressWorld struct {
	cfg    stream.Config
	client *kgo.Client
	adm    *kadm.Client
	base   time.Time
}

func newProgressWorld(t *testing.T, cfg stream.Config) *progressWorld {
	t.Helper()
	client := streamtest.Client(t, cfg, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	return &progressWorld{cfg: cfg, client: client, adm: kadm.NewClient(client),
		base: time.Now().UTC().Truncate(time.Second).Add(-time.Hour)}
}

// produce writes n records to partition, the i-th stamped base + first + i seconds.
func (w *progressWorld) produce(t *testing.T, partition int32, first, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		r := &kgo.Record{Topic: w.cfg.ReadingsTopic(), Partition: partition, Value: []byte(`{}`),
			Timestamp: w.at(first + i)}
		if err := w.client.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func (w *progressWorld) at(seconds int) time.Time {
	return w.base.Add(time.Duration(seconds) * time.Second)
}

// commit commits the group's offset of each partition.
func (w *progressWorld) commit(t *testing.T, offsets map[int32]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var os kadm.Offsets
	for p, o := range offsets {
		os.Add(kadm.Offset{Topic: w.cfg.ReadingsTopic(), Partition: p, At: o, LeaderEpoch: -1})
	}
	resp, err := w.adm.CommitOffsets(ctx, progressGroup, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("committing %v: %v", offsets, err)
	}
}

func newProgress(t *testing.T, cfg stream.Config, refetch time.Duration) *stream.Progress {
	t.Helper()
	p, err := stream.NewProgress(stream.ProgressConfig{Stream: cfg, Group: progressGroup, Refetch: refetch},
		streamtest.Client(t, cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func watermark(t *testing.T, p *stream.Progress, now time.Time) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := p.Watermark(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestProgressWatermark walks a group through a topic: caught up on an empty topic,
// at the first record when nothing is committed, at the earliest first unconsumed
// record across partitions as commits advance, and at now once caught up.
func TestProgressWatermark(t *testing.T) {
	t.Parallel()
	cfg := streamtest.Config(t, 2)
	w := newProgressWorld(t, cfg)
	p := newProgress(t, cfg, time.Nanosecond) // always read the record at the committed offset
	now := w.at(3600)
	check := func(what string, want time.Time) {
		t.Helper()
		now = now.Add(time.Second)
		if want.After(now) {
			want = now
		}
		if got := watermark(t, p, now); !got.Equal(want) {
			t.Fatalf("%s: watermark %s, want %s", what, got, want)
		}
	}

	check("empty topic", w.at(7200))
	w.produce(t, 0, 10, 5) // offsets 0-4 stamped 10-14 s
	w.produce(t, 1, 20, 5) // offsets 0-4 stamped 20-24 s
	check("nothing committed", w.at(10))
	w.commit(t, map[int32]int64{0: 3})
	check("partition 0 at offset 3, partition 1 not committed", w.at(13))
	w.commit(t, map[int32]int64{0: 5, 1: 2})
	check("partition 0 caught up, partition 1 at offset 2", w.at(22))
	w.commit(t, map[int32]int64{1: 5})
	check("both caught up", w.at(7200))
	w.produce(t, 1, 30, 1)
	check("a new record on partition 1", w.at(30))
	if got := watermark(t, p, w.at(25)); !got.Equal(w.at(25)) {
		t.Fatalf("watermark %s later than now %s", got, w.at(25))
	}
}

// TestProgressRefetchLimit shows the cost limit: while the group moves on within
// Refetch, the record read before stands in (an earlier, more cautious watermark);
// after Refetch the new first unconsumed record is read.
func TestProgressRefetchLimit(t *testing.T) {
	t.Parallel()
	cfg := streamtest.Config(t, 1)
	w := newProgressWorld(t, cfg)
	p := newProgress(t, cfg, time.Minute)
	w.produce(t, 0, 10, 10)
	now := w.at(3600)

	w.commit(t, map[int32]int64{0: 2})
	if got := watermark(t, p, now); !got.Equal(w.at(12)) {
		t.Fatalf("watermark %s, want %s", got, w.at(12))
	}
	w.commit(t, map[int32]int64{0: 6})
	if got := watermark(t, p, now.Add(30*time.Second)); !got.Equal(w.at(12)) {
		t.Fatalf("within Refetch: watermark %s, want the record read before, %s", got, w.at(12))
	}
	if got := watermark(t, p, now.Add(time.Minute)); !got.Equal(w.at(16)) {
		t.Fatalf("after Refetch: watermark %s, want %s", got, w.at(16))
	}
	// A group moved back (offsets reset) is read again at once: the record read
	// before is later than the new first unconsumed one.
	w.commit(t, map[int32]int64{0: 1})
	if got := watermark(t, p, now.Add(time.Minute+time.Second)); !got.Equal(w.at(11)) {
		t.Fatalf("after a reset: watermark %s, want %s", got, w.at(11))
	}
}

// TestProgressCommittedPastTheEnd covers a topic recreated under a group that had
// committed further than its new end: the consumer resumes at the log start, and so
// does the watermark.
func TestProgressCommittedPastTheEnd(t *testing.T) {
	t.Parallel()
	cfg := streamtest.Config(t, 1)
	w := newProgressWorld(t, cfg)
	p := newProgress(t, cfg, 0)
	w.produce(t, 0, 10, 3)
	w.commit(t, map[int32]int64{0: 100})
	if got := watermark(t, p, w.at(3600)); !got.Equal(w.at(10)) {
		t.Fatalf("watermark %s, want the first record's %s", got, w.at(10))
	}
}

// TestProgressBrokerDown: with Kafka unreachable the watermark is an error, never
// a guess.
func TestProgressBrokerDown(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := stream.Config{Brokers: c.ListenAddrs(), Partitions: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stream.EnsureTopics(ctx, streamtest.Client(t, cfg), cfg); err != nil {
		t.Fatal(err)
	}
	client := streamtest.Client(t, cfg, kgo.RetryTimeout(time.Second), kgo.RequestRetries(1))
	p, err := stream.NewProgress(stream.ProgressConfig{Stream: cfg, Group: progressGroup}, client, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Watermark(ctx, time.Now()); err != nil {
		t.Fatalf("broker up: %v", err)
	}
	c.Close()
	if got, err := p.Watermark(ctx, time.Now()); err == nil {
		t.Fatalf("broker down: watermark %s, want an error", got)
	}
}

func TestProgressConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := stream.NewProgress(stream.ProgressConfig{Refetch: -time.Second}, nil, nil)
	for _, want := range []string{"Group", "Refetch", "client"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewProgress error %v, want one naming %s", err, want)
		}
	}
}

// TestProgressReadsFromEachLeader runs on three brokers, so the partitions have
// different leaders and each record must be read from its own.
func TestProgressReadsFromEachLeader(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cfg := stream.Config{Brokers: c.ListenAddrs(), Partitions: 6}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stream.EnsureTopics(ctx, streamtest.Client(t, cfg), cfg); err != nil {
		t.Fatal(err)
	}
	// kfake picks each partition's leader at random (all six on one broker about
	// once in 240 runs): spread them over the three brokers.
	for part := range int32(6) {
		if err := c.MoveTopicPartition(cfg.ReadingsTopic(), part, part%3); err != nil {
			t.Fatal(err)
		}
	}
	w := newProgressWorld(t, cfg)
	meta, err := w.adm.Metadata(ctx, cfg.ReadingsTopic())
	if err != nil {
		t.Fatal(err)
	}
	leaders := map[int32]bool{}
	for _, pd := range meta.Topics[cfg.ReadingsTopic()].Partitions {
		leaders[pd.Leader] = true
	}
	if len(leaders) < 2 {
		t.Fatalf("the partitions share one leader (%v); the test needs several", leaders)
	}
	p := newProgress(t, cfg, time.Nanosecond)
	now := w.at(3600)
	for part := range int32(6) {
		w.produce(t, part, 100-10*int(part), 2) // partition 5 holds the earliest records
	}
	if got := watermark(t, p, now); !got.Equal(w.at(50)) {
		t.Fatalf("nothing consumed: watermark %s, want %s", got, w.at(50))
	}
	// Walk the group through the partitions from the earliest: each step's
	// watermark is the first record of the earliest partition still unconsumed.
	for done := int32(5); done >= 0; done-- {
		now = now.Add(time.Second)
		want := now
		if done > 0 {
			want = w.at(100 - 10*int(done-1))
		}
		w.commit(t, map[int32]int64{done: 2})
		if got := watermark(t, p, now); !got.Equal(want) {
			t.Fatalf("partitions %d-5 consumed: watermark %s, want %s", done, got, want)
		}
	}
}
