package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// shutdown is how a process stops: its readiness turns off at once, the
// daemons keep running for delay (load balancers and Kubernetes take the
// process out of rotation meanwhile), then they stop one at a time in reverse
// order of start, within timeout.
type shutdown struct {
	// delay is LOCKSTREAM_SHUTDOWN_DELAY: how long /readyz answers 503 while
	// everything still runs and the listeners still serve.
	delay time.Duration
	// timeout is LOCKSTREAM_SHUTDOWN_TIMEOUT: how long stopping the daemons may
	// take once the delay is over.
	timeout time.Duration
	// drain turns readiness off (webapi.Health.Drain).
	drain func()
}

// errShutdownTimeout is returned when daemons were still stopping at the
// shutdown timeout. They were left running: what they hold (pools, clients, the
// embedded broker) must not be closed, since closing waits for them.
var errShutdownTimeout = errors.New("shutdown timed out")

// runningDaemon is a daemon that runs in a goroutine of its own.
type runningDaemon struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{} // closed once run returned
	err    error         // run's error; read it after done
}

func (r *runningDaemon) stopped() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// runInOrder runs daemons, given in start order, each on a context of its own,
// until ctx ends (a signal) or one of them fails, then stops them as plan says:
// on a signal after the delay, on a failure at once. A daemon is stopped by
// cancelling its context and waiting for its run to return before the next one
// (the one started before it) is cancelled, so intake stops before what it
// feeds, and the process's metrics and probes are served to the end. It
// returns nil when every daemon stopped cleanly, else every error, each
// named by its daemon; errShutdownTimeout when the timeout passed first.
func runInOrder(ctx context.Context, daemons []daemon, plan shutdown, logger *slog.Logger) error {
	// The daemons' contexts do not end with ctx: each ends on its turn.
	base := context.WithoutCancel(ctx)
	ended := make(chan *runningDaemon, len(daemons))
	running := make([]*runningDaemon, 0, len(daemons))
	for _, d := range daemons {
		dctx, cancel := context.WithCancel(base)
		r := &runningDaemon{name: d.name, cancel: cancel, done: make(chan struct{})}
		running = append(running, r)
		logger.Info("daemon starting", "daemon", d.name)
		go func() {
			r.err = d.run(dctx)
			close(r.done)
			ended <- r
		}()
	}
	failed := awaitStop(ctx, ended, plan, logger)
	plan.drain()
	var errs []error
	if failed != nil {
		errs = append(errs, fmt.Errorf("%s: %w", failed.name, failed.err))
	}
	deadline := time.NewTimer(plan.timeout)
	defer deadline.Stop()
	for i := len(running) - 1; i >= 0; i-- {
		r := running[i]
		r.cancel()
		select {
		case <-r.done:
		case <-deadline.C:
			return errors.Join(append(errs, abandon(running[:i+1], plan.timeout, logger))...)
		}
		switch {
		case r == failed:
		case r.err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", r.name, r.err))
		default:
			logger.Info("daemon stopped", "daemon", r.name)
		}
	}
	return errors.Join(errs...)
}

// awaitStop waits until the process is to stop: ctx ended and then the
// shutdown delay passed, or a daemon failed, which it returns. A daemon that
// ends cleanly on its own (one with nothing to do) does not stop the others.
func awaitStop(ctx context.Context, ended <-chan *runningDaemon, plan shutdown, logger *slog.Logger) *runningDaemon {
	done := ctx.Done()
	var delay <-chan time.Time
	for {
		select {
		case <-done:
			// A nil channel blocks: ctx is not waited on again.
			done = nil
			plan.drain()
			logger.Info("stopping: not ready from now on; serving on for the shutdown delay, then stopping the daemons in reverse order",
				"delay", plan.delay, "timeout", plan.timeout)
			timer := time.NewTimer(plan.delay)
			defer timer.Stop()
			delay = timer.C
		case <-delay:
			return nil
		case r := <-ended:
			if r.err != nil {
				return r
			}
			logger.Info("daemon stopped", "daemon", r.name)
		}
	}
}

// abandon cancels every daemon still running at the shutdown timeout and
// returns the error that names them.
func abandon(left []*runningDaemon, timeout time.Duration, logger *slog.Logger) error {
	var names []string
	for _, r := range left {
		r.cancel()
		if !r.stopped() {
			names = append(names, r.name)
		}
	}
	logger.Error("shutdown timed out; exiting with daemons still stopping", "timeout", timeout, "daemons", names)
	return fmt.Errorf("%w after %v: %s still stopping", errShutdownTimeout, timeout, strings.Join(names, ", "))
}
