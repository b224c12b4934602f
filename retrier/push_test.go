package retrier_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/swrve"
	"github.com/lockstream/lockstream/notifier/swrve/swrvetest"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
)

// pushCall is one push a pushStub received.
type pushCall struct {
	push swrve.Push
	at   time.Time // the retrier's clock when the call came
}

// pushStub stands in for the Swrve sender: it answers standalone pushes with a
// scripted sequence of results (the last one repeats) and records each call.
// It is a sender, not a store: the outbox and the attempt log are real.
type pushStub struct {
	t      *testing.T
	now    func() time.Time
	mu     sync.Mutex
	script []notifier.Result
	calls  []pushCall
}

// Send is the standalone push sender's.
func (s *pushStub) Send(_ context.Context, p swrve.Push) notifier.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, pushCall{push: p, at: s.now()})
	res := s.script[0]
	if len(s.script) > 1 {
		s.script = s.script[1:]
	}
	return res
}

func (s *pushStub) sent() []pushCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pushCall(nil), s.calls...)
}

// noSensorPushes is the sensor push sender of tests that have no sensor pushes.
type noSensorPushes struct{ t *testing.T }

func (s noSensorPushes) Send(_ context.Context, target storage.PushTarget, n notifier.Notification) notifier.Result {
	s.t.Errorf("unexpected sensor push to %v about %s", target, n.EventID)
	return notifier.Result{Outcome: notifier.Failed, ErrorType: "TEST", Err: errors.New("unexpected")}
}

// startPushRetrier runs a retrier whose only channel is swrve, with sender for
// standalone pushes.
func (b *bundle) startPushRetrier(sender retrier.StandalonePushSender) {
	b.t.Helper()
	r, err := retrier.New(b.testConfig(retrier.Config{}), retrier.Deps{Store: b.pg, Attempts: b.stores.ClickHouse,
		Push: noSensorPushes{b.t}, StandalonePush: sender}, b.reg, slog.New(slog.NewTextHandler(b.logs, nil)))
	if err != nil {
		b.t.Fatal(err)
	}
	b.cancel, b.stopped = b.run(r)
}

// push stores a standalone push received now (the test clock), due at window.
func (b *bundle) push(device, prototype, cronExpr string, window time.Time) storage.Push {
	b.t.Helper()
	p, err := b.pg.CreatePush(b.ctx, storage.PushRequest{Platform: storage.PlatformIOS, MessagePrototypeKey: prototype,
		PushKey: device, Message: "hello " + device, CronExpression: cronExpr, ReceivedAt: b.clock.Now(), WindowAt: window})
	if err != nil {
		b.t.Fatal(err)
	}
	return p
}

var (
	swrve503 = notifier.Result{Outcome: notifier.Retry, HTTPStatus: 503, ErrorType: "SWRVE",
		AnswerCode: 503, AnswerMessage: "Service Unavailable", Err: errors.New("swrve answered 503: Service Unavailable")}
	swrveOK = notifier.Result{Outcome: notifier.Sent, HTTPStatus: 200, AnswerCode: 200, AnswerMessage: "OK"}
)

func TestStandalonePushRetriedUntilSent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noRetrier: true})
	stub := &pushStub{t: t, now: b.clock.Now, script: []notifier.Result{swrve503, swrve503, swrve503, swrveOK}}
	p := b.push("device-1", "Hello", "", b.clock.Now())
	b.startPushRetrier(stub)

	// Each 503 leaves it RETRY; the next attempt comes once the back-off passed.
	for n := 1; n <= 3; n++ {
		d := b.waitState(p.ID, storage.DeliveryRetry, n)
		if d.LastHTTPStatus != 503 || !d.NextAttemptAt.After(b.clock.Now()) {
			t.Fatalf("after attempt %d: %+v", n, d)
		}
		if calls := len(stub.sent()); calls != n {
			t.Fatalf("%d sends after %d attempts", calls, n)
		}
		b.clock.Set(d.NextAttemptAt)
	}
	b.waitState(p.ID, storage.DeliverySent, 4)

	for i, c := range stub.sent() {
		if c.push != (swrve.Push{Platform: storage.PlatformIOS, MessagePrototypeKey: "Hello", PushKey: "device-1",
			Message: "hello device-1"}) {
			t.Fatalf("send %d = %+v", i+1, c)
		}
	}
	attempts := b.attempts(p.ID, 4)
	for i, a := range attempts {
		want, code, message := storage.DeliveryRetry, 503, "Service Unavailable"
		if i == 3 {
			want, code, message = storage.DeliverySent, 200, "OK"
		}
		// The stub answers like Swrve: {"code":<status>,"message":...}.
		if a.Attempt != i+1 || a.Status != want || a.HTTPStatus != code || a.Channel != storage.ChannelSwrve ||
			a.AnswerCode != code || a.AnswerMessage != message {
			t.Fatalf("attempt %d = %+v, want %s %d with Swrve's code %d %q", i+1, a, want, code, code, message)
		}
	}
	b.wantCounter("swrve", "sent", 1)
}

func TestStandalonePushWithoutPrototypeKeyFails(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noRetrier: true})
	stub := &pushStub{t: t, now: b.clock.Now, script: []notifier.Result{{Outcome: notifier.Failed,
		ErrorType: "MESSAGE_PROTOTYPE_KEY", Err: errors.New(`no Swrve push key for message prototype "Nope" on IOS`)}}}
	p := b.push("device-1", "Nope", "", b.clock.Now())
	b.startPushRetrier(stub)

	d := b.waitState(p.ID, storage.DeliveryFailed, 1)
	if d.LastError == "" {
		t.Fatalf("FAILED push has no last error: %+v", d)
	}
	a := b.attempts(p.ID, 1)[0]
	if a.Status != storage.DeliveryFailed || a.ErrorType != "MESSAGE_PROTOTYPE_KEY" || a.Error == "" {
		t.Fatalf("attempt = %+v", a)
	}
	if len(stub.sent()) != 1 {
		t.Fatalf("%d sends, want 1: a FAILED push is not retried", len(stub.sent()))
	}
}

func TestScheduledPushWaitsForItsWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noRetrier: true})
	stub := &pushStub{t: t, now: b.clock.Now, script: []notifier.Result{swrveOK}}
	window := b.clock.Now().Add(2 * time.Second)
	scheduled := b.push("device-late", "Hello", "*/2 * * * * *", window)
	if scheduled.State != storage.DeliveryScheduled {
		t.Fatalf("a push with a cron expression is %s", scheduled.State)
	}
	// An immediate push created after it: once it is sent, the retrier has
	// claimed with the scheduled one in the outbox, before its window.
	canary := b.push("device-now", "Hello", "", b.clock.Now())
	b.startPushRetrier(stub)
	b.waitState(canary.ID, storage.DeliverySent, 1)
	if d := b.get(scheduled.ID); d.State != storage.DeliveryScheduled || d.Attempts != 0 {
		t.Fatalf("before its window the scheduled push is %s after %d attempts", d.State, d.Attempts)
	}

	b.clock.Set(window)
	b.waitState(scheduled.ID, storage.DeliverySent, 1)
	calls := stub.sent()
	if len(calls) != 2 || calls[1].push.PushKey != "device-late" || calls[1].at.Before(window) {
		t.Fatalf("sends = %+v, want the scheduled push sent second, at or after %s", calls, window)
	}
}

func TestSwrveSendersComeTogether(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noRetrier: true})
	stub := &pushStub{t: t, now: b.clock.Now, script: []notifier.Result{swrveOK}}
	for name, deps := range map[string]retrier.Deps{
		"push only":       {Store: b.pg, Attempts: b.stores.ClickHouse, Push: noSensorPushes{t}},
		"standalone only": {Store: b.pg, Attempts: b.stores.ClickHouse, StandalonePush: stub},
	} {
		if _, err := retrier.New(retrier.Config{}, deps, b.reg, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// The Swrve sender is what the retrier's push interfaces are declared for.
var (
	_ retrier.StandalonePushSender = (*swrve.Sender)(nil)
	_ retrier.PushSender           = swrve.NotificationSender{}
)

// TestStandalonePushThroughSwrveSender runs the real Swrve sender against the
// fake Swrve: three 503s then 200 is SENT on the 4th attempt, and a prototype
// with no push key is FAILED with MESSAGE_PROTOTYPE_KEY without a request.
func TestStandalonePushThroughSwrveSender(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noRetrier: true})
	var (
		mu   sync.Mutex
		seen []swrvetest.Request
	)
	fake := swrvetest.NewServer(swrvetest.Config{Scale: 0.001, Observe: func(r swrvetest.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r)
	}})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	fake.FailNext(3, http.StatusServiceUnavailable, 0)
	sender, err := swrve.New(swrve.Config{URL: srv.URL, PushKeys: swrve.PushKeys{
		"Hello": {storage.PlatformIOS: "campaign-ios"},
	}}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	p := b.push("device-1", "Hello", "", b.clock.Now())
	missing := b.push("device-2", "Unmapped", "", b.clock.Now())
	b.startPushRetrier(sender)

	b.waitState(missing.ID, storage.DeliveryFailed, 1)
	if a := b.attempts(missing.ID, 1)[0]; a.ErrorType != swrve.ErrorTypeMessagePrototypeKey || a.Status != storage.DeliveryFailed {
		t.Fatalf("unmapped prototype's attempt = %+v", a)
	}
	for n := 1; n <= 3; n++ {
		d := b.waitState(p.ID, storage.DeliveryRetry, n)
		b.clock.Set(d.NextAttemptAt)
	}
	b.waitState(p.ID, storage.DeliverySent, 4)
	attempts := b.attempts(p.ID, 4)
	for i, a := range attempts[:3] {
		if a.Status != storage.DeliveryRetry || a.HTTPStatus != 503 || a.ErrorType != swrve.ErrorTypeSwrve {
			t.Fatalf("attempt %d = %+v", i+1, a)
		}
	}
	if a := attempts[3]; a.Status != storage.DeliverySent || a.HTTPStatus != 200 {
		t.Fatalf("attempt 4 = %+v", a)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 4 {
		t.Fatalf("fake Swrve got %d requests, want 4 (none for the unmapped prototype)", len(seen))
	}
	for _, r := range seen {
		if r != (swrvetest.Request{PushKey: "campaign-ios", User: "device-1", Message: "hello device-1"}) {
			t.Fatalf("fake Swrve got %+v", r)
		}
	}
}

// heldPushes is a standalone push sender that holds every push until release
// is closed, counting those it holds.
type heldPushes struct {
	release chan struct{}
	mu      sync.Mutex
	held    int
	most    int
}

func (h *heldPushes) Send(ctx context.Context, _ swrve.Push) notifier.Result {
	h.mu.Lock()
	h.held++
	h.most = max(h.most, h.held)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.held--
		h.mu.Unlock()
	}()
	select {
	case <-h.release:
		return swrveOK
	case <-ctx.Done():
		return notifier.Result{Outcome: notifier.Retry, ErrorType: "TEST", Err: ctx.Err()}
	}
}

func (h *heldPushes) counts() (held, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held, h.most
}

// TestPushesHaveTheirOwnWorkers: pushes wait about a second for Swrve, so
// they get PushWorkers of their own. With every push held, the push workers
// fill up to exactly PushWorkers (far more than Workers), and a webhook is
// still delivered meanwhile; once released, every push is SENT.
func TestPushesHaveTheirOwnWorkers(t *testing.T) {
	t.Parallel()
	s := newSink(t, 200)
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	const pushWorkers, pushes = 150, 200
	h := &heldPushes{release: make(chan struct{})}
	sender, err := webhook.New(webhook.Config{AllowPrivate: true, Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sender.Close)
	r, err := retrier.New(b.testConfig(retrier.Config{Workers: 4, PushWorkers: pushWorkers, BatchSize: 40}),
		retrier.Deps{Store: b.pg, Attempts: b.stores.ClickHouse, Webhook: sender, Push: noSensorPushes{t}, StandalonePush: h},
		b.reg, slog.New(slog.NewTextHandler(b.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, pushes)
	for i := range ids {
		ids[i] = b.push(fmt.Sprintf("device-%d", i), "Hello", "", b.clock.Now()).ID
	}
	b.cancel, b.stopped = b.run(r)
	released := false
	t.Cleanup(func() {
		if !released {
			close(h.release)
		}
	})

	waitFor(t, "the push workers to fill", func() bool { held, _ := h.counts(); return held == pushWorkers })
	d := b.flip("e1", 1, time.Now())
	b.waitState(d.ID, storage.DeliverySent, 1)
	if held, most := h.counts(); held != pushWorkers || most != pushWorkers {
		t.Fatalf("pushes held %d, at most %d; want exactly the %d push workers", held, most, pushWorkers)
	}

	close(h.release)
	released = true
	for _, id := range ids {
		b.waitState(id, storage.DeliverySent, 1)
	}
	if _, most := h.counts(); most != pushWorkers {
		t.Errorf("at most %d pushes held at once, want %d", most, pushWorkers)
	}
}
