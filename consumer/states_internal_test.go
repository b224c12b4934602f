package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/internal/runtest"
)

// gatedStates is a StateStore whose ApplyStateChanges records each call and
// then waits for a value from gate: nil stores, an error fails the call.
type gatedStates struct {
	mu    sync.Mutex
	calls [][]StateChange
	gate  chan error
}

func (g *gatedStates) LookupSensors(context.Context, []string) ([]SensorLookup, error) {
	return nil, errors.New("not used")
}

func (g *gatedStates) ApplyStateChanges(ctx context.Context, changes []StateChange) error {
	g.mu.Lock()
	g.calls = append(g.calls, slices.Clone(changes))
	g.mu.Unlock()
	select {
	case err := <-g.gate:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gatedStates) sensorsOfCalls() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out [][]string
	for _, call := range g.calls {
		var ids []string
		for _, c := range call {
			ids = append(ids, c.SensorID)
		}
		out = append(out, ids)
	}
	return out
}

// TestStateWriterStoresWhatQueuedInOneStatement: while a statement is in
// flight, the batches handed over queue up (at most 2 × MaxPollRecords changes)
// and go in the next statement, in the order they came, up to MaxPollRecords
// changes (the one that does not fit leads the statement after); a failed
// statement is retried before anything after it; each batch is counted
// (stored) before its Pending closes, in order.
func TestStateWriterStoresWhatQueuedInOneStatement(t *testing.T) {
	t.Parallel()
	states := &gatedStates{gate: make(chan error)}
	m, err := newStateMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{MaxPollRecords: 3, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}.WithDefaults()
	c := &Consumer{cfg: cfg, states: states, metrics: m, logger: slog.New(slog.DiscardHandler)}
	w := newStateWriter(c)
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	running.Go(func() { w.run(ctx) })
	defer running.Wait()
	defer cancel()

	var mu sync.Mutex
	var stored []string
	hand := func(ids ...string) chan struct{} {
		t.Helper()
		var changes []StateChange
		for _, id := range ids {
			changes = append(changes, StateChange{SensorID: id})
		}
		name := fmt.Sprint(ids)
		done, err := w.hand(ctx, changes, func() {
			mu.Lock()
			stored = append(stored, name)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		return done
	}
	calls := func(want int) func() (bool, string) {
		return func() (bool, string) {
			got := states.sensorsOfCalls()
			return len(got) == want, fmt.Sprintf("statements %v, want %d of them", got, want)
		}
	}

	first := hand("a")
	runtest.WaitFor(t, calls(1))
	// Queued behind the statement in flight: b and c fit in one statement
	// with d, e does not (MaxPollRecords 3); an empty batch goes along.
	later := []chan struct{}{hand("b", "c"), hand(), hand("d"), hand("e")}
	// The queue holds 2 × MaxPollRecords changes: 4 wait, room for 2 more.
	if w.room.TryAcquire(3) || !w.room.TryAcquire(2) {
		t.Fatal("the queue's room is not 6 changes less the 4 waiting")
	}
	w.room.Release(2)
	states.gate <- errors.New("postgres is away")
	runtest.WaitFor(t, calls(2)) // the retry of a, alone
	for _, done := range append([]chan struct{}{first}, later...) {
		select {
		case <-done:
			t.Fatal("a batch is stored before its statement succeeded")
		default:
		}
	}
	states.gate <- nil
	<-first
	runtest.WaitFor(t, calls(3))
	states.gate <- nil
	for _, done := range later[:3] {
		<-done
	}
	runtest.WaitFor(t, calls(4))
	states.gate <- nil
	<-later[3]

	if !w.room.TryAcquire(6) {
		t.Error("the queue's room was not given back")
	}
	want := [][]string{{"a"}, {"a"}, {"b", "c", "d"}, {"e"}}
	if got := states.sensorsOfCalls(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("statements %v, want %v", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "[[a] [b c] [] [d] [e]]"; fmt.Sprint(stored) != want {
		t.Errorf("batches counted %v, want %s", stored, want)
	}
}
