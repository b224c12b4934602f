package contain_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockstream/lockstream/internal/contain"
)

// runLoop runs contain.Loop with step until step closes stop, then cancels it
// and fails t unless Loop returns nil; it returns the panics counter.
func runLoop(t *testing.T, interval time.Duration, step func(stop func()) (bool, error)) *prometheus.CounterVec {
	t.Helper()
	panics, err := contain.Counter(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- contain.Loop(ctx, interval, "rounds", panics, slog.New(slog.DiscardHandler),
			func(context.Context) (bool, error) { return step(func() { close(stopped) }) })
	}()
	<-stopped
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Loop = %v, want nil after cancel", err)
	}
	return panics
}

// TestLoopRunsFullRoundsAtOnce: with an interval no test waits out, a full
// round is followed by the next at once; one that is not full waits for the
// interval, and cancelling ctx meanwhile ends the loop with nil.
func TestLoopRunsFullRoundsAtOnce(t *testing.T) {
	t.Parallel()
	steps := 0
	runLoop(t, time.Hour, func(stop func()) (bool, error) {
		steps++
		switch steps {
		case 1, 2:
			return true, nil
		case 3:
			stop()
			return false, nil
		}
		t.Errorf("step %d ran: the loop should be waiting for the interval", steps)
		return false, nil
	})
	if steps != 3 {
		t.Errorf("%d steps ran, want 3", steps)
	}
}

// TestLoopSurvivesFailuresAndPanics: a step that fails and one that panics do
// not end the loop; the panic is counted under the loop's name.
func TestLoopSurvivesFailuresAndPanics(t *testing.T) {
	t.Parallel()
	steps := 0
	panics := runLoop(t, time.Millisecond, func(stop func()) (bool, error) {
		steps++
		switch steps {
		case 1:
			return true, errors.New("store down")
		case 2:
			panic("the round broke")
		case 3:
			stop() // a 4th may run before the loop sees the cancel
		}
		return false, nil
	})
	if steps < 3 {
		t.Errorf("%d steps ran, want at least 3", steps)
	}
	if n := testutil.ToFloat64(panics.WithLabelValues("rounds")); n != 1 {
		t.Errorf("panics_total{where=rounds} = %v, want 1", n)
	}
}
