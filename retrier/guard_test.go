package retrier_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockstream/lockstream/internal/contain"
	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
)

// panickyWebhook is a test notifier: it panics on the event named boom and
// sends every other notification through the real webhook sender. It counts
// its calls per event.
type panickyWebhook struct {
	boom  string
	inner *webhook.Sender

	mu    sync.Mutex
	calls map[string]int
}

func (p *panickyWebhook) Send(ctx context.Context, t webhook.Target, n notifier.Notification) notifier.Result {
	p.mu.Lock()
	p.calls[n.EventID]++
	p.mu.Unlock()
	if n.EventID == p.boom {
		var byType map[string]int
		//lint:ignore SA5000 the deliberate bug this notifier panics with
		byType[string(n.Type)]++ // a bug: assignment to entry in nil map
	}
	return p.inner.Send(ctx, t, n)
}

func (p *panickyWebhook) callsOf(eventID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[eventID]
}

// TestNotifierPanicFailsTheDelivery: a notifier that panics on one delivery
// makes that delivery FAILED with error type OTHER and the panic's value and
// stack (from the faulting frame) in its attempt; the retrier lives on, sends
// the deliveries after it, never claims the failed one again, and counts the
// panic in lockstream_panics_total{where="notifier"}.
func TestNotifierPanicFailsTheDelivery(t *testing.T) {
	t.Parallel()
	sink := newSink(t, http.StatusOK)
	b := setup(t, setupOpts{sinkURL: sink.srv.URL, noRetrier: true})
	inner, err := webhook.New(webhook.Config{AllowPrivate: true, Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inner.Close)
	sender := &panickyWebhook{boom: "e-boom", inner: inner, calls: map[string]int{}}
	r, err := retrier.New(b.testConfig(retrier.Config{}), retrier.Deps{Store: b.pg, Attempts: b.stores.ClickHouse, Webhook: sender},
		b.reg, slog.New(slog.NewTextHandler(b.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	b.run(r)

	before := b.flip("e-before", 1, time.Now().Add(-3*time.Second))
	b.waitState(before.ID, storage.DeliverySent, 1)
	// One at a time: a newer state change would supersede one still pending.
	boom := b.flip("e-boom", 0, time.Now().Add(-2*time.Second))
	failed := b.waitState(boom.ID, storage.DeliveryFailed, 1)
	after := b.flip("e-after", 1, time.Now().Add(-time.Second))
	b.waitState(after.ID, storage.DeliverySent, 1)

	a := b.attempts(boom.ID, 1)[0]
	t.Logf("the attempt's error:\n%s", a.Error)
	if a.Status != storage.DeliveryFailed || a.ErrorType != notifier.ErrorTypePanic {
		t.Errorf("the panicking attempt is %s/%s, want FAILED/OTHER", a.Status, a.ErrorType)
	}
	for _, want := range []string{"panic in notifier: assignment to entry in nil map", "(*panickyWebhook).Send", "guard_test.go:"} {
		if !strings.Contains(a.Error, want) || !strings.Contains(failed.LastError, want) {
			t.Errorf("the attempt's error and the delivery's last error lack %q:\n%s\n---\n%s", want, a.Error, failed.LastError)
		}
	}
	if first, _, _ := strings.Cut(a.Error[strings.Index(a.Error, "\n")+1:], "\n"); !strings.Contains(first, "panickyWebhook") {
		t.Errorf("the stack starts at %q, want the faulting frame", first)
	}
	if len(a.Error) > contain.MaxText {
		t.Errorf("the attempt's error is %d long, want at most %d", len(a.Error), contain.MaxText)
	}
	if got := testutil.ToFloat64(panicsTotal(t, b).WithLabelValues("notifier")); got != 1 {
		t.Errorf("panics_total{where=notifier} = %v, want 1", got)
	}
	if !b.logs.contains("recovered a panic") {
		t.Errorf("the retrier did not log the panic:\n%s", b.logs.buf.String())
	}
	// Not claimed again: one more delivery is sent after it, and the failed one
	// was tried once.
	last := b.flip("e-last", 0, time.Now())
	b.waitState(last.ID, storage.DeliverySent, 1)
	if n := sender.callsOf("e-boom"); n != 1 {
		t.Errorf("the panicking delivery was tried %d times, want once", n)
	}
	if got := b.get(boom.ID); got.State != storage.DeliveryFailed || got.Attempts != 1 {
		t.Errorf("the panicking delivery is %s after %d attempts, want FAILED after 1", got.State, got.Attempts)
	}
	if sink.count() != 3 {
		t.Errorf("the sink got %d webhooks, want the 3 that did not panic", sink.count())
	}
}

// panicsTotal returns lockstream_panics_total as the retrier registered it.
func panicsTotal(t *testing.T, b *bundle) *prometheus.CounterVec {
	t.Helper()
	c, err := contain.Counter(b.reg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
