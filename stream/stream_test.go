package stream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	cfg := stream.Config{Brokers: []string{"127.0.0.1:9092"}}.WithDefaults()
	if cfg.Partitions != stream.DefaultPartitions || cfg.ClientID != stream.DefaultClientID {
		t.Fatalf("defaults not applied: %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	for name, bad := range map[string]stream.Config{
		"Brokers":    {Partitions: 1},
		"Partitions": {Brokers: []string{"x:1"}, Partitions: -1},
	} {
		err := bad.Validate()
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", bad, err, name)
		}
	}
	prefixed := stream.Config{TopicPrefix: "t1."}
	if got := prefixed.ReadingsTopic(); got != "t1.lockstream.readings" {
		t.Errorf("ReadingsTopic = %q", got)
	}
}

func TestEnsureTopicsIsIdempotent(t *testing.T) {
	t.Parallel()
	cfg := streamtest.Config(t, 3) // creates the topics once
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := streamtest.Client(t, cfg)
	if err := stream.EnsureTopics(ctx, client, cfg); err != nil {
		t.Fatalf("second EnsureTopics: %v", err)
	}
	for _, topic := range []string{cfg.ReadingsTopic(), cfg.EventsTopic(), cfg.DLQTopic()} {
		ends, err := streamtest.EndOffsets(ctx, client, topic)
		if err != nil {
			t.Fatalf("%s: %v", topic, err)
		}
		if len(ends) != 3 {
			t.Errorf("%s has %d partitions, want 3", topic, len(ends))
		}
	}
}

// TestEmbeddedKeepsLogAcrossRestart proves the DataDir promise of DESIGN.md: a
// record acknowledged before Close is readable after reopening the same directory.
func TestEmbeddedKeepsLogAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()

	first, err := stream.StartEmbedded(ctx, dir, "127.0.0.1:0", 4)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.Config{Brokers: first.Addrs(), Partitions: 4}
	producer, err := kgo.NewClient(stream.ClientOpts(cfg)...)
	if err != nil {
		t.Fatal(err)
	}
	value := []byte(`{"sensor_id":"xa7v9Dfadr7H","data":1}`)
	res := producer.ProduceSync(ctx, &kgo.Record{Topic: stream.TopicReadings, Key: []byte("xa7v9Dfadr7H"), Value: value})
	if err := res.FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
	produced := res[0].Record
	producer.Close()
	first.Close()
	first.Close() // twice is fine

	second, err := stream.StartEmbedded(ctx, dir, "127.0.0.1:0", 4)
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	t.Cleanup(second.Close)
	cfg.Brokers = second.Addrs()
	records := streamtest.ReadAll(t, cfg, stream.TopicReadings)
	if len(records) != 1 {
		t.Fatalf("after restart the readings topic holds %d records, want 1", len(records))
	}
	got := records[0]
	if got.Partition != produced.Partition || got.Offset != produced.Offset ||
		string(got.Key) != "xa7v9Dfadr7H" || string(got.Value) != string(value) {
		t.Fatalf("after restart: %s/%d@%d %q=%q, want %d@%d %q", got.Topic, got.Partition, got.Offset,
			got.Key, got.Value, produced.Partition, produced.Offset, value)
	}
	ends, err := streamtest.EndOffsets(ctx, streamtest.Client(t, cfg), stream.TopicEvents)
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != 4 {
		t.Fatalf("events topic has %d partitions after restart, want 4", len(ends))
	}
}
