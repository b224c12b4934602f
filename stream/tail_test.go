package stream_test

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// TailEvents sees events appended after its start time (also those appended
// before its client found the partitions), not older ones, and returns nil when
// its context ends.
func TestTailEvents(t *testing.T) {
	t.Parallel()
	cfg := streamtest.Config(t, 2)
	pub := stream.NewEventPublisher(cfg, streamtest.Client(t, cfg))
	ctx := context.Background()
	one := 1
	publish := func(id, sensor string) {
		t.Helper()
		err := pub.Publish(ctx, []event.Event{{ID: id, Type: event.StateChanged, SensorID: sensor, Data: &one, At: time.Now().UTC()}})
		if err != nil {
			t.Fatal(err)
		}
	}
	publish("old", "a")
	// Record timestamps are milliseconds: since starts the millisecond after "old"
	// was acknowledged, and "e1" is published once that millisecond has begun.
	since := time.Now().Truncate(time.Millisecond).Add(time.Millisecond)
	for time.Now().Before(since) {
		runtime.Gosched()
	}
	publish("e1", "a") // before the tail starts, after since

	var (
		mu   sync.Mutex
		seen []string
	)
	tailCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- stream.TailEvents(tailCtx, cfg, since, slog.New(slog.DiscardHandler), func(e event.Event) {
			mu.Lock()
			seen = append(seen, e.ID)
			mu.Unlock()
		})
	}()
	publish("e2", "b")
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := append([]string(nil), seen...)
		mu.Unlock()
		if len(got) >= 2 {
			for _, id := range got {
				if id == "old" {
					t.Fatalf("tail saw %v, which includes an event from before since", got)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tail saw %v, want e1 and e2", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("TailEvents after cancel = %v", err)
	}
}
