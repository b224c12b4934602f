package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// journal records what fake daemons and the drain did, in order.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(e string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, e)
}

func (j *journal) all() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.entries)
}

// politeDaemon runs until its context ends and records when it does.
func politeDaemon(j *journal, name string) daemon {
	return daemon{name: name, run: func(ctx context.Context) error {
		<-ctx.Done()
		j.add("stop " + name)
		return nil
	}}
}

func testPlan(j *journal, delay, timeout time.Duration) shutdown {
	return shutdown{delay: delay, timeout: timeout, drain: func() { j.add("drain") }}
}

// On a signal, readiness is drained first, then the daemons stop one at a
// time in reverse order of start; a clean stop is no error.
func TestRunInOrderStopsInReverse(t *testing.T) {
	t.Parallel()
	j := &journal{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the signal came
	daemons := []daemon{politeDaemon(j, "metrics"), politeDaemon(j, "fanout"), politeDaemon(j, "consumer"), politeDaemon(j, "api")}
	if err := runInOrder(ctx, daemons, testPlan(j, 0, time.Minute), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("a clean stop returned %v", err)
	}
	got := slices.Compact(j.all()) // the drain is called on the signal and again before the stops
	want := []string{"drain", "stop api", "stop consumer", "stop fanout", "stop metrics"}
	if !slices.Equal(got, want) {
		t.Fatalf("shutdown went %v, want %v", got, want)
	}
}

// A failing daemon stops the others at once (no shutdown delay: nobody waits
// an hour here), in reverse order, and its error is returned with its name; a
// daemon that ends cleanly on its own stops nothing.
func TestRunInOrderFailureStopsTheOthers(t *testing.T) {
	t.Parallel()
	j := &journal{}
	failNow := make(chan struct{})
	daemons := []daemon{
		politeDaemon(j, "metrics"),
		{name: "idle", run: func(context.Context) error { j.add("idle ends"); return nil }},
		{name: "history", run: func(ctx context.Context) error {
			select {
			case <-failNow:
				return errors.New("clickhouse went away")
			case <-ctx.Done():
				t.Error("history stopped before it failed")
				return nil
			}
		}},
		politeDaemon(j, "api"),
	}
	go func() {
		// Fail only once idle has ended: it must not have stopped anything.
		for !slices.Contains(j.all(), "idle ends") {
			time.Sleep(time.Millisecond) // poll interval
		}
		close(failNow)
	}()
	err := runInOrder(context.Background(), daemons, testPlan(j, time.Hour, time.Minute), slog.New(slog.DiscardHandler))
	if err == nil || err.Error() != "history: clickhouse went away" {
		t.Fatalf("runInOrder returned %v, want history's failure", err)
	}
	got := slices.DeleteFunc(j.all(), func(e string) bool { return e == "idle ends" })
	if want := []string{"drain", "stop api", "stop metrics"}; !slices.Equal(got, want) {
		t.Fatalf("after the failure: %v, want %v", got, want)
	}
}

// A daemon still stopping at the timeout is named in errShutdownTimeout (one
// that stopped is not), and the daemons started before it are cancelled rather
// than waited for.
func TestRunInOrderTimeoutAbandons(t *testing.T) {
	t.Parallel()
	j := &journal{}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // the stuck daemon's goroutine ends with the test
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	daemons := []daemon{
		politeDaemon(j, "metrics"),
		{name: "consumer", run: func(context.Context) error { <-release; return nil }},
		politeDaemon(j, "api"),
	}
	err := runInOrder(ctx, daemons, testPlan(j, 0, 10*time.Millisecond), slog.New(slog.DiscardHandler))
	// metrics, cancelled at the timeout, may be named too: it may not have
	// returned yet when the names are taken.
	if !errors.Is(err, errShutdownTimeout) || !strings.Contains(err.Error(), "consumer") || strings.Contains(err.Error(), "api") {
		t.Fatalf("runInOrder returned %v, want the timeout naming consumer and not api", err)
	}
	// metrics was cancelled at the timeout; it records its stop on its own time.
	deadline := time.Now().Add(time.Minute)
	for !slices.Contains(j.all(), "stop metrics") {
		if time.Now().After(deadline) {
			t.Fatalf("metrics was not cancelled at the timeout: %v", j.all())
		}
		time.Sleep(time.Millisecond) // poll interval
	}
}
