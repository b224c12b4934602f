package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// outage wraps the real ClickHouse store and fails every insert while down is
// set, as a stopped server would.
type outage struct {
	consumer.HistoryStore
	down     atomic.Bool
	failures atomic.Int64
}

var errDown = errors.New("clickhouse unreachable (injected outage)")

func (o *outage) InsertReadings(ctx context.Context, rows []storage.HistoryReading) error {
	if o.down.Load() {
		o.failures.Add(1)
		return errDown
	}
	return o.HistoryStore.InsertReadings(ctx, rows)
}

func (o *outage) InsertEvents(ctx context.Context, rows []storage.HistoryEvent) error {
	if o.down.Load() {
		o.failures.Add(1)
		return errDown
	}
	return o.HistoryStore.InsertEvents(ctx, rows)
}

// committed returns the group's committed offset per partition of topic.
func committed(t *testing.T, client *kgo.Client, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	resp, err := req.RequestWith(ctx, client)
	if err != nil {
		t.Fatalf("fetching offsets of %s: %v", group, err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		t.Fatalf("fetching offsets of %s: %v", group, err)
	}
	out := map[int32]int64{}
	for _, rt := range resp.Topics {
		if rt.Topic != topic {
			continue
		}
		for _, p := range rt.Partitions {
			if p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out
}

// TestHistoryRidesOutClickHouseOutage keeps ClickHouse "down" while readings
// arrive: nothing is committed while inserts fail, and once it is back every
// valid reading is stored, once, and the offsets catch up.
func TestHistoryRidesOutClickHouseOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	cfg := streamtest.Config(t, 4)
	client := streamtest.Client(t, cfg)
	records := produce(t, client, cfg, pattern(3, 50, 600))
	want := expect(records, timestamps(t, cfg))

	store := &outage{HistoryStore: stores.ClickHouse}
	store.down.Store(true)
	history, err := consumer.NewHistory(consumer.HistoryConfig{Stream: cfg, FlushRows: 100,
		FlushInterval: 50 * time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		store, prometheus.NewRegistry(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, history.Run)

	waitFor(t, func() (bool, string) {
		n := store.failures.Load()
		return n >= 5, fmt.Sprintf("5 failed inserts, have %d", n)
	})
	if got := committed(t, client, consumer.DefaultHistoryGroup, cfg.ReadingsTopic()); len(got) != 0 {
		t.Fatalf("offsets %v committed while ClickHouse was down", got)
	}
	store.down.Store(false)

	ends, err := streamtest.EndOffsets(ctx, client, cfg.ReadingsTopic())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() (bool, string) {
		got := committed(t, client, consumer.DefaultHistoryGroup, cfg.ReadingsTopic())
		for p, end := range ends {
			if end > 0 && got[p] != end {
				return false, fmt.Sprintf("committed %v, want %v", got, ends)
			}
		}
		return true, ""
	})
	readings, err := stores.ClickHouse.AllReadings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(readings) != len(want.valid) {
		t.Fatalf("ClickHouse holds %d readings, want %d", len(readings), len(want.valid))
	}
	h.stop(t)
}

// TestHistoryFlushesOnShutdown checks that records buffered when Run is cancelled
// are written and committed before it returns.
func TestHistoryFlushesOnShutdown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	cfg := streamtest.Config(t, 2)
	client := streamtest.Client(t, cfg)
	records := produce(t, client, cfg, pattern(4, 20, 100))
	want := expect(records, timestamps(t, cfg))

	reg := prometheus.NewRegistry()
	// Neither size nor age triggers a flush during the test: only shutdown does.
	history, err := consumer.NewHistory(consumer.HistoryConfig{Stream: cfg, FlushRows: 1_000_000, FlushInterval: time.Hour},
		stores.ClickHouse, reg, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, history.Run)
	waitFor(t, func() (bool, string) {
		got := metric(t, reg, "lockstream_history_buffered_records", nil)
		return got == float64(len(records)), fmt.Sprintf("history writer to buffer every record (%v of %d)", got, len(records))
	})
	h.stop(t)

	readings, err := stores.ClickHouse.AllReadings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(readings) != len(want.valid) {
		t.Fatalf("after shutdown ClickHouse holds %d readings, want %d", len(readings), len(want.valid))
	}
	got := committed(t, client, consumer.DefaultHistoryGroup, cfg.ReadingsTopic())
	ends, err := streamtest.EndOffsets(ctx, client, cfg.ReadingsTopic())
	if err != nil {
		t.Fatal(err)
	}
	for p, end := range ends {
		if end > 0 && got[p] != end {
			t.Fatalf("after shutdown committed %v, want %v", got, ends)
		}
	}
}

var _ consumer.HistoryStore = (*storage.ClickHouse)(nil)
var _ consumer.StateStore = (*storage.Postgres)(nil)
