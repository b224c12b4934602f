package contain_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/lockstream/lockstream/internal/contain"
)

// TestMain fails the run if a test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type widget struct{ name *string }

//go:noinline
func (w *widget) length() int { return len(*w.name) }

// TestRunContainsAPanic: a round that panics (a nil pointer here) returns a
// Panic whose stack starts at the faulting frame, is counted under its where,
// and the caller goes on.
func TestRunContainsAPanic(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	panics, err := contain.Counter(reg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := contain.Counter(reg) // a second daemon of the process shares it
	if err != nil || again != panics {
		t.Fatalf("second Counter = %p, %v; want the first (%p)", again, err, panics)
	}
	err = contain.Run(context.Background(), "sweep", panics, func(context.Context) error {
		return errors.New("never: " + string(rune((&widget{}).length())))
	})
	p, ok := contain.AsPanic(err)
	if !ok || p.Where != "sweep" {
		t.Fatalf("Run = %v, want a Panic in sweep", err)
	}
	first, _, _ := strings.Cut(p.Stack, "\n")
	if !strings.Contains(first, "widget).length") {
		t.Errorf("the stack starts at %q, want the faulting frame (widget.length):\n%s", first, p.Stack)
	}
	text := err.Error()
	if !strings.HasPrefix(text, "panic in sweep: runtime error: invalid memory address") || len(text) > contain.MaxText ||
		!strings.Contains(text, "widget).length") {
		t.Errorf("Error() = %q (%d long), want the value and the faulting frame within %d", text, len(text), contain.MaxText)
	}
	if n := testutil.ToFloat64(panics.WithLabelValues("sweep")); n != 1 {
		t.Errorf("panics_total{where=sweep} = %v, want 1", n)
	}
	if err := contain.Run(context.Background(), "sweep", panics,
		func(context.Context) error { return nil }); err != nil {
		t.Errorf("a round that does not panic: %v", err)
	}
}

// TestPanicTextIsBounded: a long value and a deep stack stay within MaxText.
func TestPanicTextIsBounded(t *testing.T) {
	t.Parallel()
	p := &contain.Panic{Where: "notifier", Value: strings.Repeat("x", 3000), Stack: "f()\n\tf.go:1\n"}
	if n := len(p.Error()); n != contain.MaxText {
		t.Errorf("long value: %d characters, want %d", n, contain.MaxText)
	}
	p = &contain.Panic{Where: "notifier", Value: "boom", Stack: strings.Repeat("pkg.f()\n\t/src/f.go:10 +0x1\n", 200)}
	if text := p.Error(); len(text) > contain.MaxText || !strings.HasSuffix(text, "+0x1") {
		t.Errorf("deep stack: %d characters ending %q, want at most %d ending at a whole line", len(text), text[len(text)-10:], contain.MaxText)
	}
}
