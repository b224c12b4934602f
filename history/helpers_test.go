package history_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/internal/runtest"
	"github.com/lockstream/lockstream/stream"
)

// metric returns the sum of the named metric's series (counters and gauges).
func metric(t *testing.T, reg *prometheus.Registry, name string, _ map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// produceReadings produces n records to the readings topic, one in five of
// them invalid (a broken document, a key that is not the sensor id, a value out
// of range), and returns how many are valid.
func produceReadings(t *testing.T, client *kgo.Client, cfg stream.Config, n int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runtest.WaitTimeout)
	defer cancel()
	valid := 0
	recs := make([]*kgo.Record, 0, n)
	for i := range n {
		id := fmt.Sprintf("s%d", i%37)
		r := &kgo.Record{Topic: cfg.ReadingsTopic(), Key: []byte(id),
			Value: fmt.Appendf(nil, `{"sensor_id":%q,"data":%d,"ts":%d}`, id, i%2, 1795341600000+int64(i))}
		switch i % 15 {
		case 4:
			r.Value = []byte(`{"sensor_id":"` + id + `","data":1`)
		case 9:
			r.Key = []byte("other")
		case 14:
			r.Value = fmt.Appendf(nil, `{"sensor_id":%q,"data":2}`, id)
		default:
			valid++
		}
		recs = append(recs, r)
	}
	if err := client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing readings: %v", err)
	}
	return valid
}
