package history_test

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

	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/internal/runtest"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// outage wraps the real ClickHouse store and fails every insert while down is
// set, as a stopped server would.
type outage struct {
	history.Store
	down     atomic.Bool
	failures atomic.Int64
}

var errDown = errors.New("clickhouse unreachable (injected outage)")

func (o *outage) InsertReadings(ctx context.Context, rows []storage.HistoryReading) error {
	if o.down.Load() {
		o.failures.Add(1)
		return errDown
	}
	return o.Store.InsertReadings(ctx, rows)
}

func (o *outage) InsertEvents(ctx context.Context, rows []storage.HistoryEvent) error {
	if o.down.Load() {
		o.failures.Add(1)
		return errDown
	}
	return o.Store.InsertEvents(ctx, rows)
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
	valid := produceReadings(t, client, cfg, 600)

	store := &outage{Store: history.NewClickHouseStore(stores.ClickHouse)}
	store.down.Store(true)
	w, err := history.New(history.Config{Stream: cfg, FlushRows: 100,
		FlushInterval: 50 * time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		store, prometheus.NewRegistry(), runtest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	h := runtest.Start(t, w.Run)

	runtest.WaitFor(t, func() (bool, string) {
		n := store.failures.Load()
		return n >= 5, fmt.Sprintf("5 failed inserts, have %d", n)
	})
	if got := committed(t, client, history.DefaultGroup, cfg.ReadingsTopic()); len(got) != 0 {
		t.Fatalf("offsets %v committed while ClickHouse was down", got)
	}
	store.down.Store(false)

	ends, err := streamtest.EndOffsets(ctx, client, cfg.ReadingsTopic())
	if err != nil {
		t.Fatal(err)
	}
	runtest.WaitFor(t, func() (bool, string) {
		got := committed(t, client, history.DefaultGroup, cfg.ReadingsTopic())
		for p, end := range ends {
			if end > 0 && got[p] != end {
				return false, fmt.Sprintf("committed %v, want %v", got, ends)
			}
		}
		return true, ""
	})
	readings := storagetest.AllReadings(t, stores.ClickHouseURL)
	if len(readings) != valid {
		t.Fatalf("ClickHouse holds %d readings, want %d", len(readings), valid)
	}
	h.Stop(t)
}

// TestHistoryFlushesOnShutdown checks that records buffered when Run is cancelled
// are written and committed before it returns.
func TestHistoryFlushesOnShutdown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	cfg := streamtest.Config(t, 2)
	client := streamtest.Client(t, cfg)
	const records = 100
	valid := produceReadings(t, client, cfg, records)

	reg := prometheus.NewRegistry()
	// Neither size nor age triggers a flush during the test: only shutdown does.
	w, err := history.New(history.Config{Stream: cfg, FlushRows: 1_000_000, FlushInterval: time.Hour},
		history.NewClickHouseStore(stores.ClickHouse), reg, runtest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	h := runtest.Start(t, w.Run)
	runtest.WaitFor(t, func() (bool, string) {
		got := metric(t, reg, "lockstream_history_buffered_records", nil)
		return got == float64(records), fmt.Sprintf("history writer to buffer every record (%v of %d)", got, records)
	})
	h.Stop(t)

	readings := storagetest.AllReadings(t, stores.ClickHouseURL)
	if len(readings) != valid {
		t.Fatalf("after shutdown ClickHouse holds %d readings, want %d", len(readings), valid)
	}
	got := committed(t, client, history.DefaultGroup, cfg.ReadingsTopic())
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

var _ history.Store = (*history.ClickHouseStore)(nil)
