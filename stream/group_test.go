package stream_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

const waitTimeout = 60 * time.Second

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, state)
		}
		<-tick.C
	}
}

// recorder is a Handler that records what it is given. While hold is set, the
// batches it handles stay pending until release.
type recorder struct {
	mu       sync.Mutex
	offsets  map[int32][]int64 // handled, by partition
	assigned map[int32]bool
	hold     bool
	held     []chan struct{}
	client   *kgo.Client // the Group's, from Assigned
	closed   int         // partition handlers closed
}

func newRecorder() *recorder {
	return &recorder{offsets: map[int32][]int64{}, assigned: map[int32]bool{}}
}

func (r *recorder) Assigned(client *kgo.Client, _ string, partition int32) stream.PartitionHandler {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.client = client
	r.assigned[partition] = true
	return &recorderPartition{r: r, partition: partition}
}

type recorderPartition struct {
	r         *recorder
	partition int32
}

func (p *recorderPartition) Handle(_ context.Context, b stream.Batch) (stream.Pending, error) {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	for _, rec := range b.Records {
		p.r.offsets[b.Partition] = append(p.r.offsets[b.Partition], rec.Offset)
	}
	if !p.r.hold {
		return nil, nil
	}
	done := make(chan struct{})
	p.r.held = append(p.r.held, done)
	return done, nil
}

func (p *recorderPartition) Close() {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	delete(p.r.assigned, p.partition)
	p.r.closed++
}

func (r *recorder) handled() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.offsets {
		n += len(o)
	}
	return n
}

func (r *recorder) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, done := range r.held {
		close(done)
	}
	r.held, r.hold = nil, false
}

func (r *recorder) partitions() []int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.assigned))
}

// runGroup runs a Group until the returned stop is called or the test ends.
func runGroup(t *testing.T, cfg stream.GroupConfig, h stream.Handler) (stop func()) {
	t.Helper()
	return runGroupWith(t, cfg, h, prometheus.NewRegistry())
}

func runGroupWith(t *testing.T, cfg stream.GroupConfig, h stream.Handler, reg prometheus.Registerer) (stop func()) {
	t.Helper()
	g, err := stream.NewGroup(cfg, h, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v on a clean stop", err)
				}
			case <-time.After(waitTimeout):
				t.Errorf("Run did not return after its context was cancelled")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func produceN(t *testing.T, client *kgo.Client, topic string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}
	}
	if err := client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func committedTotal(t *testing.T, client *kgo.Client, group, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	got, err := streamtest.Committed(ctx, client, group, topic)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, o := range got {
		sum += o
	}
	return sum
}

// TestGroupCommitsOnlyDurableBatches checks that a batch whose effects are
// pending is not committed, not even at shutdown when the wait gives up, and
// that once they are durable the batch is committed.
func TestGroupCommitsOnlyDurableBatches(t *testing.T) {
	t.Parallel()
	cfg := streamtest.Config(t, 3)
	client := streamtest.Client(t, cfg)
	topic := cfg.EventsTopic()
	produceN(t, client, topic, 60)
	gcfg := stream.GroupConfig{Stream: cfg, Group: "g", Topics: []string{topic}, DrainTimeout: 200 * time.Millisecond,
		Opts: []kgo.Opt{kgo.AutoCommitInterval(100 * time.Millisecond)}}

	r := newRecorder()
	r.hold = true
	stop := runGroup(t, gcfg, r)
	waitFor(t, "every record handled", func() (bool, string) { return r.handled() == 60, fmt.Sprint(r.handled()) })
	stop()
	if got := committedTotal(t, client, "g", topic); got != 0 {
		t.Fatalf("committed %d records whose effects were pending", got)
	}

	r = newRecorder()
	r.hold = true
	stop = runGroup(t, gcfg, r)
	waitFor(t, "every record handled again", func() (bool, string) { return r.handled() == 60, fmt.Sprint(r.handled()) })
	r.release()
	waitFor(t, "the durable batches committed", func() (bool, string) {
		got := committedTotal(t, client, "g", topic)
		return got == 60, fmt.Sprintf("committed %d of 60", got)
	})
	stop()
}

// TestGroupRevokeCommitsWhatWasMarked has a second member join: the first
// commits what it marked when its partitions are revoked (autocommit is off),
// so the second starts where the first stopped.
func TestGroupRevokeCommitsWhatWasMarked(t *testing.T) {
	t.Parallel()
	cfg := streamtest.Config(t, 4)
	client := streamtest.Client(t, cfg)
	topic := cfg.EventsTopic()
	produceN(t, client, topic, 100)
	gcfg := stream.GroupConfig{Stream: cfg, Group: "g", Topics: []string{topic},
		Opts: []kgo.Opt{kgo.AutoCommitInterval(time.Hour)}}

	a := newRecorder()
	runGroup(t, gcfg, a)
	waitFor(t, "the first member to handle every record", func() (bool, string) {
		return a.handled() == 100, fmt.Sprint(a.handled())
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ends, err := streamtest.EndOffsets(ctx, client, topic)
	if err != nil {
		t.Fatal(err)
	}
	b := newRecorder()
	runGroup(t, gcfg, b)
	waitFor(t, "the partitions to be shared", func() (bool, string) {
		pa, pb := a.partitions(), b.partitions()
		return len(pa) > 0 && len(pb) > 0 && len(pa)+len(pb) == 4, fmt.Sprintf("first %v, second %v", pa, pb)
	})
	produceN(t, client, topic, 100)
	waitFor(t, "the new records to be handled", func() (bool, string) {
		n := a.handled() + b.handled()
		return n >= 200, fmt.Sprintf("%d of 200 handled (first %d, second %d)", n, a.handled(), b.handled())
	})
	// What the first member handled and marked before the revoke was
	// committed then: the second starts after it.
	b.mu.Lock()
	defer b.mu.Unlock()
	for p, offsets := range b.offsets {
		if len(offsets) > 0 && offsets[0] < ends[p] {
			t.Errorf("second member started partition %d at offset %d; the first had handled up to %d", p, offsets[0], ends[p])
		}
	}
}

// TestGroupLostCommitsNothing has the broker answer a member's heartbeat with
// UNKNOWN_MEMBER_ID after it handled and marked a batch that autocommit has not
// committed yet: the member's partitions are lost, and their marks are dropped,
// not committed. The broker still counts the member in the group (only the
// answer was forged), so a commit made on the loss would be accepted: the
// committed offset staying put, and the member consuming the batch again before
// a record produced after the loss, show that none was made.
func TestGroupLostCommitsNothing(t *testing.T) {
	t.Parallel()
	// A kfake cluster of the test's own, whatever BrokersEnv says: the test forges
	// a broker answer.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cfg := stream.Config{Brokers: cluster.ListenAddrs(), Partitions: 1}
	client := streamtest.Client(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := stream.EnsureTopics(ctx, client, cfg); err != nil {
		t.Fatal(err)
	}
	topic := cfg.EventsTopic()
	produceN(t, client, topic, 10)
	gcfg := stream.GroupConfig{Stream: cfg, Group: "g", Topics: []string{topic},
		Opts: []kgo.Opt{kgo.AutoCommitInterval(time.Hour), kgo.HeartbeatInterval(100 * time.Millisecond)}}

	r := newRecorder()
	runGroup(t, gcfg, r)
	waitFor(t, "the batch handled and marked", func() (bool, string) {
		r.mu.Lock()
		c := r.client
		r.mu.Unlock()
		if c == nil {
			return false, "no partition assigned"
		}
		marked := c.MarkedOffsets()[topic][0].Offset
		return marked == 10, fmt.Sprintf("marked up to %d of 10", marked)
	})
	if got := committedTotal(t, client, "g", topic); got != 0 {
		t.Fatalf("committed %d before the loss; autocommit should not have run", got)
	}

	var forged atomic.Bool
	cluster.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		forged.Store(true)
		return resp, nil, true // handled: this control answers one heartbeat only
	})
	waitFor(t, "the lost partition's worker to stop", func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.closed == 1, fmt.Sprintf("heartbeat forged: %v; handlers closed: %d", forged.Load(), r.closed)
	})
	if got := committedTotal(t, client, "g", topic); got != 0 {
		t.Errorf("committed offset %d after the loss, want 0: the lost marks were committed", got)
	}
	// The member rejoins and resumes at the committed offset: it consumes the
	// lost batch again before offset 10.
	produceN(t, client, topic, 1)
	waitFor(t, "the record produced after the loss handled", func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		got := r.offsets[0]
		return slices.Contains(got, 10), fmt.Sprintf("handled offsets %v", got)
	})
	r.mu.Lock()
	got := slices.Clone(r.offsets[0])
	r.mu.Unlock()
	want := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if !slices.Equal(got, want) {
		t.Errorf("handled offsets %v, want the lost batch again before offset 10: %v", got, want)
	}
	if got := committedTotal(t, client, "g", topic); got != 0 {
		t.Errorf("committed offset %d after the loss, want 0: the lost marks were committed", got)
	}
}

// TestGroupExportsClientMetrics checks that the Group's Kafka client reports
// through kprom on the registry it was given, labelled with its name, and that
// two clients of one name in one registry do not collide.
func TestGroupExportsClientMetrics(t *testing.T) {
	t.Parallel()
	cfg := streamtest.Config(t, 2)
	client := streamtest.Client(t, cfg)
	topic := cfg.EventsTopic()
	produceN(t, client, topic, 10)
	reg := prometheus.NewRegistry()
	gcfg := stream.GroupConfig{Stream: cfg, Group: "g", Topics: []string{topic}, ClientName: "mine"}
	r := newRecorder()
	runGroupWith(t, gcfg, r, reg)
	// A second client of the same name on the same registry must not fail. It is
	// in a group of its own, so it fetches every record too whichever client's
	// collector the registry exports: in one shared group the other member
	// could own every partition and the exported client fetch nothing.
	second := gcfg
	second.Group = "g2"
	runGroupWith(t, second, newRecorder(), reg)
	waitFor(t, "records fetched and counted", func() (bool, string) {
		families, err := reg.Gather()
		if err != nil {
			return false, err.Error()
		}
		for _, f := range families {
			if f.GetName() != "lockstream_kafka_fetch_bytes_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "client" && l.GetValue() == "mine" && m.GetCounter().GetValue() > 0 {
						return true, ""
					}
				}
			}
		}
		return false, "no lockstream_kafka_fetch_bytes_total{client=\"mine\"} above 0"
	})
}
