package stream_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/reading"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

func TestSimulate(t *testing.T) {
	t.Parallel()
	cfg := streamtest.Config(t, 3)
	client := streamtest.Client(t, cfg)
	var out timedWriter
	sim := stream.SimulateConfig{Sensors: 40, Rate: 400, Flip: 0.3, SilentFraction: 0.25,
		SilentAfter: 300 * time.Millisecond, Duration: 1500 * time.Millisecond, Topic: cfg.ReadingsTopic(), Seed: 7}
	if err := stream.Simulate(context.Background(), client, sim, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var sent, acked int
	if _, err := fmt.Sscanf(lines[len(lines)-1], "simulate done: %d readings sent, %d acknowledged", &sent, &acked); err != nil {
		t.Fatalf("no summary in %q: %v", out.String(), err)
	}
	if !strings.Contains(out.String(), "10 sensors fall silent") {
		t.Errorf("no silence announced in %q", out.String())
	}
	records := streamtest.ReadAll(t, cfg, cfg.ReadingsTopic())
	if sent == 0 || acked != sent || len(records) != sent {
		t.Fatalf("summary says %d sent, %d acknowledged; the topic holds %d", sent, acked, len(records))
	}
	lastTalking := map[string]time.Time{}
	for _, r := range records {
		parsed, err := reading.Parse(r.Key, r.Value)
		if err != nil {
			t.Fatalf("simulated reading %q rejected: %v", r.Value, err)
		}
		if r.Timestamp.After(lastTalking[parsed.SensorID]) {
			lastTalking[parsed.SensorID] = r.Timestamp
		}
	}
	// The last quarter of the fleet falls silent: nothing of theirs is produced
	// after the announcement, while the others go on.
	silentAt := out.silentAt.Truncate(time.Millisecond)
	talkedAfter := 0
	for i := range sim.Sensors {
		last := lastTalking[stream.SimSensorID(i)]
		if i >= 30 && last.After(silentAt) {
			t.Errorf("silent sensor %d talked at %v, after falling silent at %v", i, last, silentAt)
		}
		if i < 30 && last.After(silentAt) {
			talkedAfter++
		}
	}
	if talkedAfter == 0 {
		t.Error("no sensor talked after the silent ones fell silent")
	}
	if len(lastTalking) > sim.Sensors {
		t.Errorf("%d sensors talked, fleet is %d", len(lastTalking), sim.Sensors)
	}
}

// timedWriter keeps what Simulate prints and notes when the silence is announced.
type timedWriter struct {
	bytes.Buffer
	silentAt time.Time
}

func (w *timedWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("fall silent")) {
		w.silentAt = time.Now()
	}
	return w.Buffer.Write(p)
}
