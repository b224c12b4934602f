package stream_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// TestBacklog walks a group through a topic against end offsets taken once: all
// of it behind while nothing is committed, less as commits advance, nothing once
// committed up to the ends, even while more is produced after them; an offset
// committed past the topic's end (a recreated topic) counts from the log start.
func TestBacklog(t *testing.T) {
	t.Parallel()
	cfg := streamtest.Config(t, 2)
	w := newProgressWorld(t, cfg)
	b, err := stream.NewBacklog(streamtest.Client(t, cfg), progressGroup, cfg.ReadingsTopic())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := b.Ends(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, ends, want map[int32]int64) {
		t.Helper()
		got, err := b.Behind(ctx, ends)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%s: behind %v, want %v", what, got, want)
		}
	}
	check("empty topic", ends, map[int32]int64{})

	w.produce(t, 0, 10, 5)
	w.produce(t, 1, 20, 3)
	if ends, err = b.Ends(ctx); err != nil {
		t.Fatal(err)
	}
	if want := map[int32]int64{0: 5, 1: 3}; !maps.Equal(ends, want) {
		t.Fatalf("ends %v, want %v", ends, want)
	}
	check("nothing committed", ends, map[int32]int64{0: 5, 1: 3})
	w.commit(t, map[int32]int64{0: 2})
	check("partition 0 at offset 2", ends, map[int32]int64{0: 3, 1: 3})
	w.produce(t, 0, 30, 2) // after the ends: not waited for
	w.commit(t, map[int32]int64{0: 6, 1: 3})
	check("committed to the ends and past them", ends, map[int32]int64{})
	w.commit(t, map[int32]int64{1: 100})
	check("partition 1 committed past the topic's end", ends, map[int32]int64{1: 3})
}
