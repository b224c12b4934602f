package webapi_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/swrve"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
)

const testPushToken = "test-push-token-fedcba9876543210"

// pushAuth is the header of a request with the push token.
var pushAuth = []string{"Authorization", "Bearer " + testPushToken}

type pushJSON struct {
	ID                  string     `json:"id"`
	Platform            string     `json:"platform"`
	MessagePrototypeKey string     `json:"messagePrototypeKey"`
	PushKey             string     `json:"pushKey"`
	Message             string     `json:"message"`
	CronExpression      *string    `json:"cronExpression"`
	State               string     `json:"state"`
	Attempts            int        `json:"attempts"`
	ReceivedAt          time.Time  `json:"received_at"`
	WindowAt            time.Time  `json:"window_at"`
	NextAttemptAt       *time.Time `json:"next_attempt_at"`
	LastError           *string    `json:"last_error"`
	AttemptLog          []struct {
		Attempt      int     `json:"attempt"`
		Status       string  `json:"status"`
		DurationMS   int64   `json:"duration_ms"`
		ErrorType    *string `json:"error_type"`
		HTTPStatus   *int    `json:"http_status"`
		SwrveCode    *int    `json:"swrve_code"`
		SwrveMessage *string `json:"swrve_message"`
		Error        *string `json:"error"`
	} `json:"attempt_log"`
}

// newPushAPI is a server with the push token and the push routes backed by the
// test's stores; cfg's tokens default to the test ones.
func newPushAPI(t *testing.T, cfg webapi.Config, withPushes bool) *testAPI {
	t.Helper()
	stores := storagetest.New(t)
	reg := prometheus.NewRegistry()
	if cfg.AdminToken == "" {
		cfg.AdminToken = testToken
	}
	var opts []webapi.Option
	if withPushes {
		opts = append(opts, webapi.WithPushes(stores.Postgres, stores.Postgres))
	}
	server, err := webapi.New(cfg, stores.Registry, nil, reg, reg, slog.New(slog.NewTextHandler(io.Discard, nil)), opts...)
	if err != nil {
		t.Fatalf("webapi.New: %v", err)
	}
	ts := httptest.NewServer(server.Handler())
	t.Cleanup(ts.Close)
	return &testAPI{t: t, url: ts.URL, stores: stores, registry: reg, server: server}
}

func pushRequest(cron any) map[string]any {
	return map[string]any{"platform": "IOS", "messagePrototypeKey": "Hello", "pushKey": "device-1",
		"message": "Door unlocked", "cronExpression": cron}
}

// outboxEmpty fails unless no delivery was stored.
func (a *testAPI) outboxEmpty() {
	a.t.Helper()
	stats, err := a.stores.Postgres.OutboxStats(context.Background(), time.Now().Add(time.Hour))
	if err != nil {
		a.t.Fatal(err)
	}
	for state, n := range stats.Depth {
		if n != 0 {
			a.t.Fatalf("%d %s deliveries stored", n, state)
		}
	}
}

func TestLegacyPushAnswersEmptyOnceStored(t *testing.T) {
	t.Parallel()
	a := newPushAPI(t, webapi.Config{PushToken: testPushToken}, true)
	before := time.Now()
	resp := a.request("POST", "/push", pushRequest(nil), pushAuth...)
	if resp.status != http.StatusOK || len(resp.body) != 0 {
		t.Fatalf("POST /push = %d %q, want 200 with an empty body", resp.status, resp.body)
	}
	// The answer came after the push was durable: it is in the outbox, due now.
	ctx := context.Background()
	claimed, err := a.stores.Postgres.ClaimDeliveries(ctx, time.Now().Add(time.Second), 10, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claimed %v, %v; want the one push", claimed, err)
	}
	p, err := a.stores.Postgres.GetPush(ctx, claimed[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Platform != storage.PlatformIOS || p.MessagePrototypeKey != "Hello" || p.PushKey != "device-1" ||
		p.Message != "Door unlocked" || p.CronExpression != "" || p.Target != "IOS:device-1" ||
		p.ReceivedAt.Before(before.Truncate(time.Microsecond)) || !p.WindowAt.Equal(p.ReceivedAt) {
		t.Fatalf("stored push = %+v", p)
	}
	if got := testutil.ToFloat64(counterVec(t, a.registry, "lockstream_pushes_received_total").WithLabelValues("immediate")); got != 1 {
		t.Fatalf("immediate pushes received = %v", got)
	}
}

func TestCreateAndGetPush(t *testing.T) {
	t.Parallel()
	a := newPushAPI(t, webapi.Config{PushToken: testPushToken}, true)

	var created pushJSON
	resp := a.request("POST", "/v1/pushes", pushRequest(nil), pushAuth...).expect(http.StatusCreated)
	resp.decode(&created)
	if created.ID == "" || resp.header.Get("Location") != "/v1/pushes/"+created.ID || created.State != "PENDING" ||
		created.CronExpression != nil || created.Attempts != 0 || created.NextAttemptAt == nil {
		t.Fatalf("created = %+v (Location %q)", created, resp.header.Get("Location"))
	}
	expectUTC(t, resp.fields(), "received_at", "window_at", "next_attempt_at", "created_at", "updated_at")

	var got pushJSON
	a.request("GET", "/v1/pushes/"+created.ID, nil, pushAuth...).expect(http.StatusOK).decode(&got)
	if got.ID != created.ID || got.State != "PENDING" || got.Message != "Door unlocked" || got.PushKey != "device-1" ||
		got.MessagePrototypeKey != "Hello" || got.Platform != "IOS" || got.AttemptLog == nil || len(got.AttemptLog) != 0 {
		t.Fatalf("GET = %+v", got)
	}

	// A scheduled push waits for the expression's first activation after receipt,
	// in the expression's zone.
	var scheduled pushJSON
	a.request("POST", "/v1/pushes", pushRequest("CRON_TZ=Asia/Tokyo 0 30 9 * * *"), pushAuth...).
		expect(http.StatusCreated).decode(&scheduled)
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	w := scheduled.WindowAt.In(tokyo)
	if scheduled.State != "SCHEDULED" || w.Hour() != 9 || w.Minute() != 30 || w.Second() != 0 ||
		!w.After(scheduled.ReceivedAt) || w.Sub(scheduled.ReceivedAt) > 24*time.Hour ||
		scheduled.NextAttemptAt == nil || !scheduled.NextAttemptAt.Equal(scheduled.WindowAt) {
		t.Fatalf("scheduled = %+v (window in Tokyo %s)", scheduled, w)
	}
	a.request("GET", "/v1/pushes/"+scheduled.ID, nil, pushAuth...).expect(http.StatusOK).decode(&got)
	if got.State != "SCHEDULED" || got.CronExpression == nil || *got.CronExpression != "CRON_TZ=Asia/Tokyo 0 30 9 * * *" {
		t.Fatalf("GET scheduled = %+v", got)
	}
	received := counterVec(t, a.registry, "lockstream_pushes_received_total")
	if s, i := testutil.ToFloat64(received.WithLabelValues("scheduled")), testutil.ToFloat64(received.WithLabelValues("immediate")); s != 1 || i != 1 {
		t.Fatalf("received scheduled %v, immediate %v; want 1 and 1", s, i)
	}
	if n := testutil.CollectAndCount(a.registry, "lockstream_push_receive_seconds"); n != 1 {
		t.Fatalf("receive time series = %d, want 1 (v1)", n)
	}

	a.request("GET", "/v1/pushes/0191e7a4-0000-7000-8000-000000000000", nil, pushAuth...).
		expectProblem(http.StatusNotFound, "not-found", "push")
	a.request("GET", "/v1/pushes/nope", nil, pushAuth...).expectProblem(http.StatusNotFound, "not-found", "UUID")
}

func TestPushValidation(t *testing.T) {
	t.Parallel()
	a := newPushAPI(t, webapi.Config{PushToken: testPushToken}, true)
	for _, path := range []string{"/push", "/v1/pushes"} {
		for _, cron := range []string{"not a cron", "61 * * * *", "* * * * * * *", "CRON_TZ=Mars/Base 0 9 * * *",
			"0 0 30 2 *"} {
			p := a.request("POST", path, pushRequest(cron), pushAuth...).expectInvalid("cronExpression")
			if !strings.Contains(p.Detail, "cronExpression") {
				t.Fatalf("%s %q: detail %q does not name cronExpression", path, cron, p.Detail)
			}
		}
		a.request("POST", path, map[string]any{"platform": "WINDOWS", "messagePrototypeKey": " ", "message": ""},
			pushAuth...).expectInvalid("platform", "messagePrototypeKey", "pushKey", "message")
		a.request("POST", path, map[string]any{}, pushAuth...).
			expectInvalid("platform", "messagePrototypeKey", "pushKey", "message")
		a.request("POST", path, `{"platform":"IOS","extra":1}`, pushAuth...).
			expectProblem(http.StatusBadRequest, "malformed-body", "extra")
	}
	a.outboxEmpty()
}

func TestPushAuthentication(t *testing.T) {
	t.Parallel()
	a := newPushAPI(t, webapi.Config{PushToken: testPushToken, IngestToken: "ingest-token"}, true)
	for _, path := range []string{"/push", "/v1/pushes"} {
		// No token, and the admin and ingest tokens are refused.
		a.request("POST", path, pushRequest(nil), "Authorization", "").expectProblem(http.StatusUnauthorized, "unauthorized")
		a.request("POST", path, pushRequest(nil)).expectProblem(http.StatusUnauthorized, "unauthorized", "push token")
		a.request("POST", path, pushRequest(nil), "Authorization", "Bearer ingest-token").
			expectProblem(http.StatusUnauthorized, "unauthorized", "push token")
	}
	a.request("GET", "/v1/pushes/0191e7a4-0000-7000-8000-000000000000", nil).expectProblem(http.StatusUnauthorized, "unauthorized")
	// The push token opens nothing else.
	a.request("GET", "/v1/sensors", nil, pushAuth...).expectProblem(http.StatusUnauthorized, "unauthorized")
	a.outboxEmpty()

	// Without a push token, or without a push store, the routes are off.
	off := newPushAPI(t, webapi.Config{}, true)
	off.request("POST", "/push", pushRequest(nil), pushAuth...).expectProblem(http.StatusServiceUnavailable, "unavailable", "LOCKSTREAM_PUSH_TOKEN")
	noStore := newPushAPI(t, webapi.Config{PushToken: testPushToken}, false)
	noStore.request("POST", "/v1/pushes", pushRequest(nil), pushAuth...).expectProblem(http.StatusServiceUnavailable, "unavailable", "push")

	reg := prometheus.NewRegistry()
	for _, cfg := range []webapi.Config{
		{AdminToken: "same", PushToken: "same"},
		{AdminToken: "admin", IngestToken: "same", PushToken: "same"},
	} {
		if _, err := webapi.New(cfg, registry.New(&storage.Postgres{}), nil, reg, reg, slog.New(slog.DiscardHandler)); err == nil ||
			!strings.Contains(err.Error(), "PushToken") {
			t.Fatalf("New(%+v) = %v, want an error naming PushToken", cfg, err)
		}
	}
}

// noSensorPushes is the sensor push sender of a retrier that has no sensor
// pushes to send.
type noSensorPushes struct{}

func (noSensorPushes) Send(context.Context, storage.PushTarget, notifier.Notification) notifier.Result {
	return notifier.Result{Outcome: notifier.Failed, ErrorType: "TEST", Err: errors.New("no sensor pushes here")}
}

// swrveStub stands in for the Swrve sender in the end-to-end test; it records
// when each standalone push was sent.
type swrveStub struct {
	mu   sync.Mutex
	sent []time.Time
}

func (s *swrveStub) Send(_ context.Context, p swrve.Push) notifier.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p != (swrve.Push{Platform: storage.PlatformIOS, PushKey: "device-1", MessagePrototypeKey: "Hello", Message: "Door unlocked"}) {
		return notifier.Result{Outcome: notifier.Failed, ErrorType: "TEST", Err: errors.New("wrong push")}
	}
	s.sent = append(s.sent, time.Now())
	return notifier.Result{Outcome: notifier.Sent, HTTPStatus: 200, AnswerCode: 200, AnswerMessage: "OK"}
}

func (s *swrveStub) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.sent...)
}

// TestScheduledPushSentWhenItsWindowOpens goes through the API and a real
// retrier on the real clock: a push whose window opens 2 s after receipt is
// SCHEDULED, then SENT, not before the window.
func TestScheduledPushSentWhenItsWindowOpens(t *testing.T) {
	t.Parallel()
	a := newPushAPI(t, webapi.Config{PushToken: testPushToken}, true)
	stub := &swrveStub{}
	r, err := retrier.New(retrier.Config{PollInterval: 10 * time.Millisecond, AttemptFlushInterval: 10 * time.Millisecond},
		retrier.Deps{Store: a.stores.Postgres, Attempts: a.stores.ClickHouse, Push: noSensorPushes{}, StandalonePush: stub},
		prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("retrier Run = %v", err)
		}
	})

	var p pushJSON
	a.request("POST", "/v1/pushes", pushRequest("@every 2s"), pushAuth...).expect(http.StatusCreated).decode(&p)
	if p.State != "SCHEDULED" || p.WindowAt.Sub(p.ReceivedAt) <= time.Second || p.WindowAt.Sub(p.ReceivedAt) > 2*time.Second {
		t.Fatalf("created = %+v, want SCHEDULED with its window 2 s after receipt", p)
	}
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		a.request("GET", "/v1/pushes/"+p.ID, nil, pushAuth...).expect(http.StatusOK).decode(&p)
		if p.State == "SENT" && len(p.AttemptLog) == 1 {
			break
		}
		if p.State != "SCHEDULED" && p.State != "IN_FLIGHT" && p.State != "SENT" {
			t.Fatalf("push became %s: %+v", p.State, p)
		}
		if time.Now().After(deadline) {
			t.Fatalf("push not SENT with its attempt logged in time: %+v", p)
		}
		<-tick.C
	}
	sent := stub.times()
	if len(sent) != 1 || sent[0].Before(p.WindowAt) {
		t.Fatalf("sent at %v, window opened at %s", sent, p.WindowAt)
	}
	at := p.AttemptLog[0]
	if at.Attempt != 1 || at.Status != "SENT" || at.HTTPStatus == nil || *at.HTTPStatus != 200 || at.SwrveCode == nil ||
		*at.SwrveCode != 200 || at.SwrveMessage == nil || *at.SwrveMessage != "OK" || at.ErrorType != nil || at.Error != nil {
		t.Fatalf("attempt log = %+v, want one SENT attempt answered 200 {200, OK}", p.AttemptLog)
	}
}

// counterVec finds a registered counter vector by name.
func counterVec(t *testing.T, reg *prometheus.Registry, name string) *prometheus.CounterVec {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: f.GetHelp()}, []string{"kind"})
			var are prometheus.AlreadyRegisteredError
			if err := reg.Register(vec); errors.As(err, &are) {
				return are.ExistingCollector.(*prometheus.CounterVec)
			}
			t.Fatalf("re-registering %s did not find it", name)
		}
	}
	t.Fatalf("%s is not registered", name)
	return nil
}
