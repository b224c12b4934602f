package storage_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

func (f *outboxFixture) clientEvents(t *testing.T, clientID string, after int64, limit int) []event.ClientEvent {
	t.Helper()
	events, err := f.pg.ListClientEvents(f.ctx, clientID, after, limit)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// Each client numbers its events 1, 2, 3… in event order; a replay takes no
// seq; deliveries carry their notification's seq; the feed pages by seq.
func TestClientSeqs(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1", "s2")
	a := f.Client(t, registry.Client{Name: "a"}, "s1", "s2")
	b := f.Client(t, registry.Client{Name: "b"}, "s2")
	zero := 0
	batch := []storage.NotificationInput{
		{EventID: "e1", Type: "state_changed", SensorID: "s1", Data: &zero, At: outboxT0},
		{EventID: "e2", Type: "connection_lost", SensorID: "s2", Data: &zero, At: outboxT0.Add(time.Second)},
		{EventID: "e3", Type: "state_changed", SensorID: "s2", Data: &zero, At: outboxT0.Add(2 * time.Second)},
	}
	f.create(t, batch...)
	f.create(t, batch[1]) // a replay
	f.create(t, storage.NotificationInput{EventID: "e4", Type: "state_changed", SensorID: "s1", At: outboxT0.Add(3 * time.Second)})

	got := f.clientEvents(t, a.ID, 0, 100)
	var ids []string
	for i, e := range got {
		if e.Seq != int64(i+1) {
			t.Errorf("a's event %d has seq %d", i, e.Seq)
		}
		ids = append(ids, e.ID)
	}
	if fmt.Sprint(ids) != "[e1 e2 e3 e4]" {
		t.Fatalf("a's events %v, want e1..e4 in order", ids)
	}
	if got[1].Type != "connection_lost" || got[1].Sensor.Address != "addr of s2" || *got[1].Data != 0 || !got[1].At.Equal(outboxT0.Add(time.Second)) {
		t.Errorf("a's second event = %+v", got[1])
	}
	if bs := f.clientEvents(t, b.ID, 0, 100); len(bs) != 2 || bs[0].ID != "e2" || bs[0].Seq != 1 || bs[1].Seq != 2 {
		t.Fatalf("b's events = %+v, want e2, e3 as 1, 2", bs)
	}
	if page := f.clientEvents(t, a.ID, 2, 1); len(page) != 1 || page[0].Seq != 3 {
		t.Fatalf("a's events after 2, limit 1 = %+v", page)
	}
	if page := f.clientEvents(t, a.ID, 4, 10); len(page) != 0 {
		t.Fatalf("a's events after the last = %+v", page)
	}
	for _, d := range f.deliveries(t, a.ID) {
		if want := map[string]int64{"e1": 1, "e2": 2, "e3": 3, "e4": 4}[d.EventID]; d.Seq != want {
			t.Errorf("delivery of %s carries seq %d, want %d", d.EventID, d.Seq, want)
		}
	}
	if _, err := f.pg.ListClientEvents(f.ctx, uuid.NewString(), 0, 10); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("events of an unknown client: %v, want ErrNotFound", err)
	}
}

// Fan-outs writing for the same client at once take every seq exactly once,
// and a reader following the feed meanwhile never sees a gap: seqs commit in
// order.
func TestClientSeqsConcurrentWritersNoGap(t *testing.T) {
	t.Parallel()
	const writers, batches, perBatch = 4, 10, 5
	f := newOutboxFixture(t, "s1", "s2", "s3", "s4")
	c := f.Client(t, registry.Client{Name: "c"}, "s1", "s2", "s3", "s4")
	total := int64(writers * batches * perBatch)

	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				var batch []storage.NotificationInput
				for i := range perBatch {
					batch = append(batch, storage.NotificationInput{EventID: fmt.Sprintf("w%d-b%d-%d", w, b, i),
						Type: "state_changed", SensorID: fmt.Sprintf("s%d", w+1), At: outboxT0.Add(time.Duration(b*perBatch+i) * time.Second)})
				}
				if _, err := fanout.NewPostgresStore(f.pg).CreateNotifications(f.ctx, batch); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// Follow the feed as a receiver would, until it has everything.
	var after int64
	seen := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for after < total {
		if time.Now().After(deadline) {
			t.Fatalf("the feed stopped at seq %d of %d", after, total)
		}
		for _, e := range f.clientEvents(t, c.ID, after, 7) {
			if e.Seq != after+1 {
				t.Fatalf("after seq %d the feed gave %d: a gap", after, e.Seq)
			}
			if seen[e.ID] {
				t.Fatalf("event %s listed twice", e.ID)
			}
			seen[e.ID], after = true, e.Seq
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if extra := f.clientEvents(t, c.ID, total, 10); len(extra) != 0 || len(seen) != int(total) {
		t.Fatalf("%d distinct events by seq, %d past the total; want %d and none", len(seen), len(extra), total)
	}
}
