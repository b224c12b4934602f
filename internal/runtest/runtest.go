// Package runtest runs a daemon's Run in a test and waits on what it does:
// the helpers the consumer's and the history writer's tests share.
package runtest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"
)

// WaitTimeout is generous: tests share two cores with everything else under -race.
const WaitTimeout = 90 * time.Second

// Logger logs at debug level to stderr when LOCKSTREAM_TEST_LOG is set, and
// nowhere otherwise.
func Logger() *slog.Logger {
	if os.Getenv("LOCKSTREAM_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// WaitFor polls cond until it holds or WaitTimeout passes; cond returns a
// description of what it is still waiting for.
func WaitFor(t testing.TB, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		ok, what := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", WaitTimeout, what)
		}
		<-ticker.C
	}
}

// Running is a daemon started by Start.
type Running struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error
}

// Start runs run in a goroutine until Stop or the test's end, when it is
// cancelled and waited for.
func Start(t testing.TB, run func(context.Context) error) *Running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = run(ctx)
		close(r.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(WaitTimeout):
			t.Error("daemon did not stop at cleanup")
		}
	})
	return r
}

// Stop cancels the daemon and fails t unless Run returns nil within WaitTimeout.
func (r *Running) Stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		if r.err != nil {
			t.Fatalf("Run returned %v on a clean stop", r.err)
		}
	case <-time.After(WaitTimeout):
		t.Fatal("Run did not return after its context was cancelled")
	}
}
