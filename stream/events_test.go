package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

func TestEventPublisher(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := streamtest.Config(t, 3)
	p := stream.NewEventPublisher(cfg, streamtest.Client(t, cfg))
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	events := []event.Event{
		{ID: event.ConnectionLostID("s1", at), Type: event.ConnectionLost, SensorID: "s1", At: at},
		{ID: event.ConnectionLostID("s2", at), Type: event.ConnectionLost, SensorID: "s2", At: at},
	}
	if err := p.Publish(ctx, events); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, []event.Event{{ID: "x", Type: "bogus", SensorID: "s3", At: at}}); err == nil {
		t.Fatal("an event of unknown type was published")
	}
	records := streamtest.ReadAll(t, cfg, cfg.EventsTopic())
	if len(records) != 2 {
		t.Fatalf("topic holds %d records, want 2", len(records))
	}
	for _, r := range records {
		e, err := event.Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Key) != e.SensorID || e.Type != event.ConnectionLost || e.ID != event.ConnectionLostID(e.SensorID, at) {
			t.Errorf("record key %s holds %+v", r.Key, e)
		}
	}
}
