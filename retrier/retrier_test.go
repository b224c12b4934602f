package retrier_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// waitTimeout is generous: the tests run under -race on a loaded 2-core machine.
const waitTimeout = 60 * time.Second

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// clock is a settable clock: it decides what is due, so back-off delays pass
// at the test's command rather than in real time.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// request is what a sink received.
type request struct {
	at     time.Time // when the handler began
	header http.Header
	body   webhook.Body
	raw    []byte
}

// sink is a webhook receiver answering with a scripted sequence of statuses (the
// last one repeats).
type sink struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	script []int
	header http.Header // extra response headers
	got    []request
	hold   chan struct{} // when set, requests wait for it to close
}

func newSink(t *testing.T, statuses ...int) *sink {
	t.Helper()
	s := &sink{t: t, script: statuses}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		s.t.Errorf("sink: reading body: %v", err)
	}
	var body webhook.Body
	if err := json.Unmarshal(raw, &body); err != nil {
		s.t.Errorf("sink: decoding body %q: %v", raw, err)
	}
	s.mu.Lock()
	s.got = append(s.got, request{at: at, header: r.Header.Clone(), body: body, raw: raw})
	status := s.script[0]
	if len(s.script) > 1 {
		s.script = s.script[1:]
	}
	for k, v := range s.header {
		w.Header()[k] = v
	}
	hold := s.hold
	s.mu.Unlock()
	if hold != nil {
		<-hold
	}
	w.WriteHeader(status)
}

func (s *sink) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.got...)
}

func (s *sink) count() int { return len(s.requests()) }

// logBuffer collects a retrier's log lines, so tests can wait for one.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.buf.String(), s)
}

// bundle is one test's outbox, client, sink and running retrier.
type bundle struct {
	t      *testing.T
	ctx    context.Context
	stores *storagetest.Stores
	pg     *storage.Postgres
	// registry is the registry on pg.
	registry *registry.Store
	clock    *clock
	reg      *prometheus.Registry
	client   registry.Client
	logs     *logBuffer
	cancel   func()        // stops the retrier started by setup
	stopped  chan struct{} // closed when its Run returned
}

type setupOpts struct {
	cfg       retrier.Config
	sinkURL   string
	noRetrier bool
}

const sensorID = "TestSensor"

func setup(t *testing.T, opts setupOpts) *bundle {
	t.Helper()
	stores := storagetest.New(t)
	b := &bundle{t: t, ctx: context.Background(), stores: stores, pg: stores.Postgres, registry: stores.Registry, clock: newClock(),
		reg: prometheus.NewRegistry(), logs: &logBuffer{}}
	if _, err := b.registry.CreateSensor(b.ctx, registry.Sensor{ID: sensorID, Address: "1 Main St"}); err != nil {
		t.Fatal(err)
	}
	client, err := b.registry.CreateClient(b.ctx, registry.Client{Name: "c", WebhookURL: opts.sinkURL, Secret: webhook.NewSecret()})
	if err != nil {
		t.Fatal(err)
	}
	b.client = client
	if err := b.registry.LinkSensor(b.ctx, client.ID, sensorID); err != nil {
		t.Fatal(err)
	}
	if !opts.noRetrier {
		b.start(opts.cfg)
	}
	return b
}

// testConfig is cfg with the test's clock, no jitter and quick loops.
func (b *bundle) testConfig(cfg retrier.Config) retrier.Config {
	if cfg.Now == nil {
		cfg.Now = b.clock.Now
	}
	cfg.Rand = half
	cfg.BackoffBase = time.Second
	cfg.BackoffMax = time.Minute
	cfg.PollInterval = 5 * time.Millisecond
	cfg.AttemptFlushInterval = 10 * time.Millisecond
	cfg.LeaseSweepInterval = cmp.Or(cfg.LeaseSweepInterval, time.Hour)
	cfg.StatsInterval = cmp.Or(cfg.StatsInterval, time.Hour)
	cfg.AttemptTimeout = cmp.Or(cfg.AttemptTimeout, 20*time.Second)
	cfg.Lease = cmp.Or(cfg.Lease, time.Minute)
	return cfg
}

func (b *bundle) newRetrier(cfg retrier.Config, reg prometheus.Registerer) *retrier.Retrier {
	b.t.Helper()
	sender, err := webhook.New(webhook.Config{AllowPrivate: true, Timeout: 10 * time.Second}, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(sender.Close)
	r, err := retrier.New(b.testConfig(cfg), retrier.Deps{Store: b.pg, Attempts: b.stores.ClickHouse, Webhook: sender},
		reg, slog.New(slog.NewTextHandler(b.logs, nil)))
	if err != nil {
		b.t.Fatal(err)
	}
	return r
}

// run starts r; at the end of the test it is stopped and must have returned nil.
func (b *bundle) run(r *retrier.Retrier) (cancel func(), stopped chan struct{}) {
	ctx, cancel := context.WithCancel(b.ctx)
	stopped = make(chan struct{})
	var runErr error
	go func() {
		defer close(stopped)
		runErr = r.Run(ctx)
	}()
	b.t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(waitTimeout):
			b.t.Errorf("retrier did not stop within %s", waitTimeout)
			return
		}
		if runErr != nil {
			b.t.Errorf("Run returned %v, want nil", runErr)
		}
	})
	return cancel, stopped
}

func (b *bundle) start(cfg retrier.Config) {
	b.cancel, b.stopped = b.run(b.newRetrier(cfg, b.reg))
}

// flip creates the notification of a state change at, and returns the webhook
// delivery.
func (b *bundle) flip(eventID string, data int, at time.Time) storage.Delivery {
	b.t.Helper()
	prev := 1 - data
	if _, err := fanout.NewPostgresStore(b.pg).CreateNotifications(b.ctx, []storage.NotificationInput{{
		EventID: eventID, Type: "state_changed", SensorID: sensorID, Data: &data, Previous: &prev, At: at,
	}}); err != nil {
		b.t.Fatal(err)
	}
	// The delivery is due from its creation (Postgres time): bring the clock there.
	if now := time.Now(); now.After(b.clock.Now()) {
		b.clock.Set(now)
	}
	ds, err := b.pg.ListClientDeliveries(b.ctx, b.client.ID, storage.DeliveryFilter{}, storage.Page{Limit: 1000})
	if err != nil {
		b.t.Fatal(err)
	}
	for _, d := range ds {
		if d.EventID == eventID && d.Channel == storage.ChannelWebhook {
			return d
		}
	}
	b.t.Fatalf("no webhook delivery for event %s", eventID)
	return storage.Delivery{}
}

func (b *bundle) get(id string) storage.Delivery {
	b.t.Helper()
	d, err := b.pg.GetDelivery(b.ctx, id)
	if err != nil {
		b.t.Fatal(err)
	}
	return d
}

// waitState waits until the delivery is in state after attempts attempts.
func (b *bundle) waitState(id string, state storage.DeliveryState, attempts int) storage.Delivery {
	b.t.Helper()
	var d storage.Delivery
	waitFor(b.t, fmt.Sprintf("delivery %s to be %s after %d attempts", id, state, attempts), func() bool {
		d = b.get(id)
		return d.State == state && d.Attempts == attempts
	})
	return d
}

// attempts waits for n recorded attempts of the delivery in ClickHouse.
func (b *bundle) attempts(id string, n int) []storage.DeliveryAttempt {
	b.t.Helper()
	var got []storage.DeliveryAttempt
	waitFor(b.t, fmt.Sprintf("%d attempts of %s in ClickHouse", n, id), func() bool {
		var err error
		if got, err = b.stores.ClickHouse.DeliveryAttempts(b.ctx, id); err != nil {
			b.t.Fatal(err)
		}
		return len(got) >= n
	})
	if len(got) != n {
		b.t.Fatalf("%d attempts of %s recorded, want %d", len(got), id, n)
	}
	return got
}

func (b *bundle) counter(channel, outcome string) float64 {
	return testutil.ToFloat64(deliveriesTotal(b.t, b.reg).WithLabelValues(channel, outcome))
}

// wantCounter checks lockstream_deliveries_total{channel, outcome}. The
// retrier counts an outcome just after writing it to the outbox, so a test
// that saw the state may be a moment early: wait for the count to reach want,
// then check it did not pass it.
func (b *bundle) wantCounter(channel, outcome string, want float64) {
	b.t.Helper()
	what := fmt.Sprintf("deliveries_total{%s,%s} to reach %v", channel, outcome, want)
	waitFor(b.t, what, func() bool { return b.counter(channel, outcome) >= want })
	if got := b.counter(channel, outcome); got != want {
		b.t.Errorf("deliveries_total{%s,%s} = %v, want %v", channel, outcome, got, want)
	}
}

// deliveriesTotal finds lockstream_deliveries_total in reg by registering an
// identical collector, which returns the existing one.
func deliveriesTotal(t *testing.T, reg *prometheus.Registry) *prometheus.CounterVec {
	t.Helper()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "lockstream", Name: "deliveries_total",
		Help: "Deliveries that reached an outcome, by channel and outcome (sent, retry, failed, given_up, superseded).",
	}, []string{"channel", "outcome"})
	err := reg.Register(c)
	are, ok := err.(prometheus.AlreadyRegisteredError)
	if !ok {
		t.Fatalf("lockstream_deliveries_total is not registered (err %v)", err)
	}
	return are.ExistingCollector.(*prometheus.CounterVec)
}

func TestRetrierRetriesUntilSentWithGrowingDelays(t *testing.T) {
	t.Parallel()
	s := newSink(t, 500, 500, 500, 200)
	b := setup(t, setupOpts{sinkURL: s.srv.URL})
	at := time.Now().Add(-time.Second).UTC().Truncate(time.Second)
	d := b.flip("e1", 1, at)

	var delays []time.Duration
	for attempt := 1; attempt <= 3; attempt++ {
		got := b.waitState(d.ID, storage.DeliveryRetry, attempt)
		if got.LastHTTPStatus != 500 || !strings.Contains(got.LastError, "500") {
			t.Fatalf("after attempt %d: %+v", attempt, got)
		}
		delay := got.NextAttemptAt.Sub(b.clock.Now())
		want := retrier.Backoff(attempt, time.Second, time.Minute, half)
		if diff := delay - want; diff < -time.Microsecond || diff > time.Microsecond {
			t.Fatalf("delay after attempt %d = %s, want Backoff = %s", attempt, delay, want)
		}
		if s.count() != attempt {
			t.Fatalf("sink got %d requests before the delay passed, want %d", s.count(), attempt)
		}
		delays = append(delays, delay)
		b.clock.Set(got.NextAttemptAt)
	}
	if !(delays[0] < delays[1] && delays[1] < delays[2]) {
		t.Fatalf("delays %v do not grow", delays)
	}
	sent := b.waitState(d.ID, storage.DeliverySent, 4)
	if sent.LastHTTPStatus != 200 || sent.LastError != "" {
		t.Fatalf("sent delivery = %+v", sent)
	}

	reqs := s.requests()
	if len(reqs) != 4 {
		t.Fatalf("sink got %d requests, want 4", len(reqs))
	}
	for i, r := range reqs {
		if err := webhook.Verify(b.client.Secret, r.header, r.raw, time.Hour); err != nil {
			t.Errorf("request %d: %v", i+1, err)
		}
		if r.header.Get(webhook.HeaderID) != "e1" || r.body.ID != "e1" || r.body.Attempt != i+1 ||
			r.body.Type != "state_changed" || r.body.Sensor.ID != sensorID || r.body.Sensor.Address != "1 Main St" ||
			r.body.Data == nil || *r.body.Data != 1 || r.body.Previous == nil || *r.body.Previous != 0 || !r.body.At.Equal(at) {
			t.Errorf("request %d: headers %v body %+v", i+1, r.header, r.body)
		}
	}

	recorded := b.attempts(d.ID, 4)
	for i, a := range recorded {
		wantStatus, wantHTTP := storage.DeliveryRetry, 500
		if i == 3 {
			wantStatus, wantHTTP = storage.DeliverySent, 200
		}
		if a.Attempt != i+1 || a.Status != wantStatus || a.HTTPStatus != wantHTTP || a.ClientID != b.client.ID ||
			a.SensorID != sensorID || a.EventID != "e1" || a.Channel != storage.ChannelWebhook {
			t.Errorf("recorded attempt %d = %+v", i+1, a)
		}
	}
	b.wantCounter("webhook", "retry", 3)
	b.wantCounter("webhook", "sent", 1)
}

func TestRetrierFailsAtOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		status    int
		header    http.Header
		errorType string
	}{
		{"bad request", 400, nil, webhook.ErrorTypeHTTPStatus},
		{"abort header", 503, http.Header{"Webhook-Delivery": {"abort-message"}}, webhook.ErrorTypeAborted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSink(t, c.status)
			s.mu.Lock()
			s.header = c.header
			s.mu.Unlock()
			b := setup(t, setupOpts{sinkURL: s.srv.URL})
			d := b.flip("e1", 1, time.Now())
			failed := b.waitState(d.ID, storage.DeliveryFailed, 1)
			if failed.LastHTTPStatus != c.status {
				t.Fatalf("failed delivery = %+v", failed)
			}
			if a := b.attempts(d.ID, 1)[0]; a.Status != storage.DeliveryFailed || a.ErrorType != c.errorType {
				t.Fatalf("recorded attempt = %+v", a)
			}
			if s.count() != 1 {
				t.Fatalf("sink got %d requests, want 1", s.count())
			}
		})
	}
}

func TestRetrierGivesUpThenRetryDelivers(t *testing.T) {
	t.Parallel()
	// A sink that is down: its address refuses connections.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b := setup(t, setupOpts{sinkURL: "http://" + addr + "/hook", cfg: retrier.Config{MaxAttempts: 3}})
	d := b.flip("e1", 0, time.Now())
	for attempt := 1; attempt <= 2; attempt++ {
		got := b.waitState(d.ID, storage.DeliveryRetry, attempt)
		b.clock.Set(got.NextAttemptAt)
	}
	gaveUp := b.waitState(d.ID, storage.DeliveryGivenUp, 3)
	if gaveUp.LastHTTPStatus != 0 || gaveUp.LastError == "" {
		t.Fatalf("given-up delivery = %+v", gaveUp)
	}
	for _, a := range b.attempts(d.ID, 3) {
		if a.ErrorType != webhook.ErrorTypeConnection {
			t.Errorf("attempt %d error type %q, want %s", a.Attempt, a.ErrorType, webhook.ErrorTypeConnection)
		}
	}

	// The sink comes back on the same address; an operator retries the delivery.
	s := &sink{t: t, script: []int{204}}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if s.srv.Listener, err = net.Listen("tcp", addr); err != nil {
		t.Fatalf("reopening the sink's address: %v", err)
	}
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	if _, err := b.pg.RetryDelivery(b.ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	b.waitState(d.ID, storage.DeliverySent, 1)
	if s.count() != 1 {
		t.Fatalf("sink got %d requests, want 1", s.count())
	}
	b.wantCounter("webhook", "given_up", 1)
}

func TestRetrierRereadsTheURL(t *testing.T) {
	t.Parallel()
	old, next := newSink(t, 503), newSink(t, 200)
	b := setup(t, setupOpts{sinkURL: old.srv.URL})
	d := b.flip("e1", 1, time.Now())
	retry := b.waitState(d.ID, storage.DeliveryRetry, 1)
	if _, err := b.registry.UpdateClient(b.ctx, b.client.ID, registry.ClientUpdate{WebhookURL: &next.srv.URL}); err != nil {
		t.Fatal(err)
	}
	b.clock.Set(retry.NextAttemptAt)
	b.waitState(d.ID, storage.DeliverySent, 2)
	if old.count() != 1 || next.count() != 1 {
		t.Fatalf("old URL got %d requests, new URL %d; want 1 each", old.count(), next.count())
	}
	if got := next.requests()[0].body.Attempt; got != 2 {
		t.Fatalf("new URL got attempt %d, want 2", got)
	}
}

func TestRetrierStopsWhenClientUnlinked(t *testing.T) {
	t.Parallel()
	s := newSink(t, 503)
	b := setup(t, setupOpts{sinkURL: s.srv.URL})
	d := b.flip("e1", 1, time.Now())
	retry := b.waitState(d.ID, storage.DeliveryRetry, 1)
	if err := b.registry.UnlinkSensor(b.ctx, b.client.ID, sensorID); err != nil {
		t.Fatal(err)
	}
	b.clock.Set(retry.NextAttemptAt)
	failed := b.waitState(d.ID, storage.DeliveryFailed, 2)
	if !strings.Contains(failed.LastError, "no longer owns sensor") {
		t.Fatalf("failed delivery = %+v", failed)
	}
	if s.count() != 1 {
		t.Fatalf("sink got %d requests, want only the one before the unlink", s.count())
	}
	if a := b.attempts(d.ID, 2)[1]; a.ErrorType != retrier.ErrorTypeNotOwned || a.Status != storage.DeliveryFailed {
		t.Fatalf("second recorded attempt = %+v", a)
	}
}

func TestRetrierSupersedesOlderFlipWhileSinkDown(t *testing.T) {
	t.Parallel()
	s := newSink(t, 503, 200)
	b := setup(t, setupOpts{sinkURL: s.srv.URL})
	t0 := time.Now().Add(-time.Minute)
	older := b.flip("e1", 1, t0)
	retry := b.waitState(older.ID, storage.DeliveryRetry, 1)
	newer := b.flip("e2", 0, t0.Add(time.Second))
	if got := b.get(older.ID); got.State != storage.DeliverySuperseded {
		t.Fatalf("older flip is %s after the newer one arrived, want SUPERSEDED", got.State)
	}
	b.clock.Set(retry.NextAttemptAt)
	b.waitState(newer.ID, storage.DeliverySent, 1)
	reqs := s.requests()
	if len(reqs) != 2 || reqs[0].body.ID != "e1" || reqs[1].body.ID != "e2" {
		t.Fatalf("sink got %d requests (%+v), want e1's failed attempt then e2", len(reqs), reqs)
	}
	b.wantCounter("webhook", "sent", 1)
}

func TestRetrierRequeuesExpiredLease(t *testing.T) {
	t.Parallel()
	s := newSink(t, 200)
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	d := b.flip("e1", 1, time.Now())
	// A retrier that dies after claiming.
	claimed, err := b.pg.ClaimDeliveries(b.ctx, b.clock.Now(), 10, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	b.start(retrier.Config{LeaseSweepInterval: 5 * time.Millisecond})
	b.clock.Set(claimed[0].LeasedUntil.Add(time.Second))
	b.waitState(d.ID, storage.DeliverySent, 2)
	if s.count() != 1 {
		t.Fatalf("sink got %d requests, want 1", s.count())
	}
}

func TestRetrierDrainsInFlightAttemptsOnShutdown(t *testing.T) {
	t.Parallel()
	s := newSink(t, 200)
	hold := make(chan struct{})
	s.mu.Lock()
	s.hold = hold
	s.mu.Unlock()
	b := setup(t, setupOpts{sinkURL: s.srv.URL})
	d := b.flip("e1", 1, time.Now())
	waitFor(t, "the attempt to reach the sink", func() bool { return s.count() == 1 })

	b.cancel()
	waitFor(t, "the retrier to begin its shutdown", func() bool { return b.logs.contains("retrier stopping") })
	// The attempt is still at the sink: Run must wait for it.
	select {
	case <-b.stopped:
		t.Fatal("Run returned while an attempt was in flight")
	default:
	}
	close(hold)
	select {
	case <-b.stopped:
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after the attempt finished")
	}
	// Everything below was written after ctx was cancelled.
	if got := b.get(d.ID); got.State != storage.DeliverySent || got.Attempts != 1 {
		t.Fatalf("delivery after shutdown = %+v, want SENT", got)
	}
	if a := b.attempts(d.ID, 1)[0]; a.Status != storage.DeliverySent {
		t.Fatalf("attempt recorded at shutdown = %+v", a)
	}
}

func TestTwoRetriersDeliverEachOnce(t *testing.T) {
	t.Parallel()
	s := newSink(t, 200)
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	const n = 40
	var events []storage.NotificationInput
	t0 := time.Now().Add(-time.Hour)
	for i := range n {
		events = append(events, storage.NotificationInput{EventID: fmt.Sprintf("e%02d", i), Type: "connection_lost",
			SensorID: sensorID, At: t0.Add(time.Duration(i) * time.Second)})
	}
	if _, err := fanout.NewPostgresStore(b.pg).CreateNotifications(b.ctx, events); err != nil {
		t.Fatal(err)
	}
	cfg := retrier.Config{Now: time.Now, Workers: 4, BatchSize: 3}
	b.run(b.newRetrier(cfg, b.reg))
	b.run(b.newRetrier(cfg, b.reg))
	waitFor(t, "every delivery to be sent", func() bool {
		return testutil.ToFloat64(deliveriesTotal(t, b.reg).WithLabelValues("webhook", "sent")) == n
	})
	reqs := s.requests()
	if len(reqs) != n {
		t.Fatalf("sink got %d requests, want %d", len(reqs), n)
	}
	// One client, one sensor: in event order, each once.
	for i, r := range reqs {
		if want := fmt.Sprintf("e%02d", i); r.body.ID != want {
			t.Fatalf("request %d is %s, want %s", i, r.body.ID, want)
		}
	}
}

// recordingSender is a channel sender that accepts everything and remembers
// where each notification went.
type recordingSender struct {
	mu  sync.Mutex
	got []string // "address event-id attempt"
}

func (s *recordingSender) record(to string, n notifier.Notification) notifier.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, fmt.Sprintf("%s %s %d", to, n.EventID, n.Attempt))
	return notifier.Result{Outcome: notifier.Sent}
}

func (s *recordingSender) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

type emailSender struct{ recordingSender }

func (s *emailSender) Send(_ context.Context, to string, n notifier.Notification) notifier.Result {
	return s.record(to, n)
}

type pushSender struct{ recordingSender }

func (s *pushSender) Send(_ context.Context, target storage.PushTarget, n notifier.Notification) notifier.Result {
	return s.record(string(target.Platform)+"/"+target.PushKey, n)
}

func TestRetrierRoutesByChannel(t *testing.T) {
	t.Parallel()
	s := newSink(t, 200)
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	email, push := "c@example.com", []storage.PushTarget{{Platform: storage.PlatformIOS, PushKey: "k1"}}
	if _, err := b.registry.UpdateClient(b.ctx, b.client.ID, registry.ClientUpdate{Email: &email, PushTargets: &push}); err != nil {
		t.Fatal(err)
	}
	newRetrier := func(emails *emailSender, pushes *pushSender) *retrier.Retrier {
		sender, err := webhook.New(webhook.Config{AllowPrivate: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sender.Close)
		deps := retrier.Deps{Store: b.pg, Attempts: b.stores.ClickHouse, Webhook: sender, Email: emails}
		if pushes != nil {
			// Standalone pushes share the channel; this test has none to send.
			deps.Push, deps.StandalonePush = pushes, &pushStub{t: t, now: b.clock.Now, script: []notifier.Result{swrveOK}}
		}
		r, err := retrier.New(b.testConfig(retrier.Config{}), deps, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	byChannel := func(eventID string) map[storage.Channel]storage.Delivery {
		ds, err := b.pg.ListClientDeliveries(b.ctx, b.client.ID, storage.DeliveryFilter{}, storage.Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		out := map[storage.Channel]storage.Delivery{}
		for _, d := range ds {
			if d.EventID == eventID {
				out[d.Channel] = d
			}
		}
		return out
	}

	// A retrier without a push sender leaves pushes alone.
	emails := &emailSender{}
	cancel, stopped := b.run(newRetrier(emails, nil))
	b.flip("e1", 1, time.Now())
	first := byChannel("e1")
	b.waitState(first[storage.ChannelWebhook].ID, storage.DeliverySent, 1)
	b.waitState(first[storage.ChannelEmail].ID, storage.DeliverySent, 1)
	if got := b.get(first[storage.ChannelSwrve].ID); got.State != storage.DeliveryPending || got.Attempts != 0 {
		t.Fatalf("push delivery with no push sender = %+v, want untouched", got)
	}
	cancel()
	<-stopped

	pushes := &pushSender{}
	cancel, stopped = b.run(newRetrier(&emailSender{}, pushes))
	b.waitState(first[storage.ChannelSwrve].ID, storage.DeliverySent, 1)
	if got := fmt.Sprint(emails.sent(), pushes.sent()); got != "[c@example.com e1 1] [IOS/k1 e1 1]" {
		t.Fatalf("email and push sends = %s", got)
	}
	cancel()
	<-stopped

	// The client drops its address and device before the next event's attempts:
	// those deliveries fail, the webhook goes.
	if _, err := fanout.NewPostgresStore(b.pg).CreateNotifications(b.ctx, []storage.NotificationInput{{EventID: "e2", Type: "connection_lost",
		SensorID: sensorID, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	noEmail, noPush := "", []storage.PushTarget{}
	if _, err := b.registry.UpdateClient(b.ctx, b.client.ID, registry.ClientUpdate{Email: &noEmail, PushTargets: &noPush}); err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); now.After(b.clock.Now()) {
		b.clock.Set(now)
	}
	emails, pushes = &emailSender{}, &pushSender{}
	b.run(newRetrier(emails, pushes))
	second := byChannel("e2")
	b.waitState(second[storage.ChannelWebhook].ID, storage.DeliverySent, 1)
	for _, ch := range []storage.Channel{storage.ChannelEmail, storage.ChannelSwrve} {
		b.waitState(second[ch].ID, storage.DeliveryFailed, 1)
		if a := b.attempts(second[ch].ID, 1)[0]; a.ErrorType != retrier.ErrorTypeNoAddress {
			t.Errorf("%s attempt = %+v, want error type %s", ch, a, retrier.ErrorTypeNoAddress)
		}
	}
	if len(emails.sent()) != 0 || len(pushes.sent()) != 0 {
		t.Fatalf("sent to a removed address: %v %v", emails.sent(), pushes.sent())
	}
}

func TestRetrierExportsOutboxGauges(t *testing.T) {
	t.Parallel()
	s := newSink(t, 200)
	b := setup(t, setupOpts{sinkURL: s.srv.URL, noRetrier: true})
	b.flip("e1", 1, time.Now().Add(-time.Minute))
	// A retrier holds e1 for an hour; e2 waits behind it.
	if claimed, err := b.pg.ClaimDeliveries(b.ctx, b.clock.Now(), 10, time.Hour); err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	waiting := b.flip("e2", 0, time.Now())
	b.clock.Set(waiting.NextAttemptAt.Add(90 * time.Second))
	b.start(retrier.Config{StatsInterval: 5 * time.Millisecond})

	gauge := func(name string, labels map[string]string) (float64, bool) {
		families, err := b.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
		metrics:
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if labels[l.GetName()] != l.GetValue() {
						continue metrics
					}
				}
				return m.GetGauge().GetValue(), true
			}
		}
		return 0, false
	}
	waitFor(t, "the outbox gauges", func() bool {
		pending, ok1 := gauge("lockstream_outbox_depth", map[string]string{"state": "PENDING"})
		inFlight, ok2 := gauge("lockstream_outbox_depth", map[string]string{"state": "IN_FLIGHT"})
		oldest, ok3 := gauge("lockstream_outbox_oldest_due_seconds", nil)
		return ok1 && ok2 && ok3 && pending == 1 && inFlight == 1 && oldest == 90
	})
	if s.count() != 0 {
		t.Fatalf("sink got %d requests; e2 must wait behind the in-flight e1", s.count())
	}
}
