package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// requestCounter counts the requests a kgo client writes to brokers.
type requestCounter struct{ n atomic.Int64 }

func (c *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err == nil {
		c.n.Add(1)
	}
}

// BenchmarkWatermark measures what the heartbeat sweep's watermark costs on a
// readings topic of 12 partitions (kfake, in process), each holding 1,000 records:
// one call of stream.Progress.Watermark, in time and in Kafka requests, when
//
//   - caught-up: the state group committed every partition to its end;
//
//   - stalled: every partition lags and the committed offsets stand still (the
//     record at each was read before, so nothing is fetched);
//
//   - moving: every partition lags and its committed offset moved since the last
//     call, with Refetch at 1 ns so each call reads the 12 records anew (the worst
//     case; with the default Refetch of 5 s a partition is read at most every 5 s).
//
//     go test -run '^$' -bench Watermark ./bench/
func BenchmarkWatermark(b *testing.B) {
	const partitions, perPartition = 12, 1000
	cfg := streamtest.Config(b, partitions)
	producer := streamtest.Client(b, cfg, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := context.Background()
	base := time.Now().Add(-time.Hour)
	for p := range int32(partitions) {
		recs := make([]*kgo.Record, perPartition)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: cfg.ReadingsTopic(), Partition: p, Value: []byte(`{"sensor_id":"x","data":1}`),
				Timestamp: base.Add(time.Duration(i) * time.Second)}
		}
		if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	adm := kadm.NewClient(producer)
	commit := func(at int64) {
		var os kadm.Offsets
		for p := range int32(partitions) {
			os.Add(kadm.Offset{Topic: cfg.ReadingsTopic(), Partition: p, At: at, LeaderEpoch: -1})
		}
		resp, err := adm.CommitOffsets(ctx, "bench-state", os)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	run := func(b *testing.B, before func(i int)) {
		counter := &requestCounter{}
		p, err := stream.NewProgress(stream.ProgressConfig{Stream: cfg, Group: "bench-state", Refetch: time.Nanosecond},
			streamtest.Client(b, cfg, kgo.WithHooks(counter)), nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Watermark(ctx, time.Now()); err != nil { // connections and metadata
			b.Fatal(err)
		}
		var timed time.Duration
		counter.n.Store(0)
		for i := 0; b.Loop(); i++ {
			before(i)
			start := time.Now()
			if _, err := p.Watermark(ctx, time.Now()); err != nil {
				b.Fatal(err)
			}
			timed += time.Since(start)
		}
		b.ReportMetric(float64(timed.Microseconds())/float64(b.N), "µs/watermark")
		b.ReportMetric(float64(counter.n.Load())/float64(b.N), "requests/watermark")
	}
	b.Run("caught-up", func(b *testing.B) {
		commit(perPartition)
		run(b, func(int) {})
	})
	b.Run("stalled", func(b *testing.B) {
		commit(perPartition / 2)
		run(b, func(int) {})
	})
	b.Run("moving", func(b *testing.B) {
		run(b, func(i int) { commit(int64(i % perPartition)) })
	})
}
