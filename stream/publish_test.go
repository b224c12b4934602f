package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

func TestReadingPublisher(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := streamtest.Config(t, 3)
	p := stream.NewReadingPublisher(cfg, streamtest.Client(t, cfg))
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("a")}
	values := [][]byte{[]byte(`{"sensor_id":"a","data":1}`), []byte(`{"sensor_id":"b","data":0}`), []byte(`{"sensor_id":"a","data":0}`)}
	if err := p.PublishReadings(ctx, keys, values); err != nil {
		t.Fatal(err)
	}
	if err := p.PublishReadings(ctx, keys[:1], values); err == nil {
		t.Fatal("mismatched keys and values accepted")
	}
	records := streamtest.ReadAll(t, cfg, cfg.ReadingsTopic())
	if len(records) != 3 {
		t.Fatalf("topic holds %d records, want 3", len(records))
	}
	// Both readings of sensor a went to one partition, in order.
	var ofA []string
	for _, r := range records {
		if string(r.Key) == "a" {
			ofA = append(ofA, string(r.Value))
		}
	}
	if len(ofA) != 2 || ofA[0] != string(values[0]) || ofA[1] != string(values[2]) {
		t.Fatalf("readings of a = %q, want %q then %q", ofA, values[0], values[2])
	}
}
