// Package contain keeps a panic where work is done — a notifier, a template, a
// round of a loop, a handler — from ending the process: it becomes an error
// that carries the panic's value and stack, is logged, and is counted in
// lockstream_panics_total{where}. The Swrve seed's rule: a delivery whose
// sender panicked is FAILED with error type OTHER and the stack in its
// attempt, and is not tried again (the same panic would come back).
package contain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	lsmetrics "github.com/lockstream/lockstream/internal/metrics"
)

// MaxText bounds a Panic's Error text, so that it fits an attempt's error
// (the retrier keeps 1,024 characters): the value and as many frames from
// the panicking one down as fit.
const MaxText = 1000

// Panic is a recovered panic.
type Panic struct {
	// Where names the work that panicked (notifier, template, escalation, ...).
	Where string
	// Value is what was passed to panic.
	Value any
	// Stack is the goroutine's stack from the frame that panicked down, the
	// runtime's own frames left out.
	Stack string
}

// Error is "panic in <where>: <value>" and the stack, at most MaxText long.
func (p *Panic) Error() string {
	head := fmt.Sprintf("panic in %s: %v", p.Where, p.Value)
	if len(head) >= MaxText {
		return strings.ToValidUTF8(head[:MaxText], "")
	}
	s := head
	for line := range strings.Lines(p.Stack) {
		if len(s)+1+len(line) > MaxText {
			break
		}
		if s == head {
			s += "\n"
		}
		s += line
	}
	return strings.TrimRight(s, "\n")
}

// Recovered returns the Panic for a value recover() returned, with the stack
// of the goroutine that panicked; nil for nil. Call it in the deferred
// function that recovered, before it returns, or the stack is gone.
func Recovered(where string, v any) *Panic {
	if v == nil {
		return nil
	}
	return &Panic{Where: where, Value: v, Stack: panicFrames(string(debug.Stack()))}
}

// panicFrames cuts a stack (debug.Stack's format) to the frames below the
// last call to panic (the runtime's frames of a fault, such as sigpanic,
// left out too); the whole stack if there is none.
func panicFrames(stack string) string {
	lines := strings.Split(strings.TrimRight(stack, "\n"), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "panic(") {
			start = i + 2 // the call and its file line
		}
	}
	if start < 0 || start >= len(lines) {
		return stack
	}
	for start+1 < len(lines) && strings.HasPrefix(lines[start], "runtime.") {
		start += 2
	}
	return strings.Join(lines[start:], "\n") + "\n"
}

// Counter returns lockstream_panics_total{where}, registered with reg once
// per process (every daemon of `lockstream all` shares it).
func Counter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	return lsmetrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: lsmetrics.Namespace, Name: "panics_total",
		Help: "Panics recovered where work is done (notifier, template, a round, a handler): the work failed, the process went on.",
	}, []string{"where"}))
}

// Report logs p at Error with its stack and counts it under its Where.
func Report(ctx context.Context, p *Panic, panics *prometheus.CounterVec, logger *slog.Logger, attrs ...any) {
	panics.WithLabelValues(p.Where).Inc()
	logger.ErrorContext(ctx, "recovered a panic: the work failed, the process goes on",
		append([]any{"where", p.Where, "panic", fmt.Sprint(p.Value), "stack", p.Stack}, attrs...)...)
}

// Run calls fn (a round of a loop) and contains a panic in it: counted under
// where and returned as a *Panic (its Error has the value and the stack), for
// the loop to log as any failed round and go on with the next.
func Run(ctx context.Context, where string, panics *prometheus.CounterVec, fn func(context.Context) error) (err error) {
	defer func() {
		if p := Recovered(where, recover()); p != nil {
			panics.WithLabelValues(where).Inc()
			err = p
		}
	}()
	return fn(ctx)
}

// AsPanic reports whether err is (or wraps) a recovered panic, and returns it.
func AsPanic(err error) (*Panic, bool) {
	var p *Panic
	ok := errors.As(err, &p)
	return p, ok
}
