package history_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/stream"
)

// waitTimeout is generous: tests share two cores with everything else under -race.
const waitTimeout = 90 * time.Second

func testLogger() *slog.Logger {
	if os.Getenv("LOCKSTREAM_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// waitFor polls cond until it holds or waitTimeout passes; cond returns a
// description of what it is still waiting for.
func waitFor(t *testing.T, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		ok, what := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", waitTimeout, what)
		}
		<-ticker.C
	}
}

// running is a writer started by start.
type running struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error
}

// stop cancels the writer and waits for Run to return nil.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		if r.err != nil {
			t.Fatalf("Run returned %v on a clean stop", r.err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

func start(t *testing.T, run func(context.Context) error) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = run(ctx)
		close(r.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(waitTimeout):
			t.Error("writer did not stop at cleanup")
		}
	})
	return r
}

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
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
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
