package swrve_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/swrve"
	"github.com/lockstream/lockstream/notifier/swrve/swrvetest"
	"github.com/lockstream/lockstream/storage"
)

// testKeys is the mapping the tests send with.
var testKeys = swrve.PushKeys{
	"Hello": {storage.PlatformIOS: "campaign-hello-ios", storage.PlatformAndroid: "campaign-hello-android"},
	"sensor.state_changed": {
		storage.PlatformIOS: "campaign-state-ios", storage.PlatformAndroid: "campaign-state-android",
	},
}

// hello is a push the mapping has a key for.
var hello = swrve.Push{Platform: storage.PlatformIOS, MessagePrototypeKey: "Hello", PushKey: "device-1", Message: "hi"}

// fixture is a Sender talking to a fake Swrve.
type fixture struct {
	fake   *swrvetest.Server
	srv    *httptest.Server
	sender *swrve.Sender
	reg    *prometheus.Registry

	mu       sync.Mutex
	requests []swrvetest.Request
}

// setup starts a fake Swrve with fakeCfg (Observe is set by setup) and a Sender
// for it with cfg (URL and, unless set, PushKeys are filled in).
func setup(t *testing.T, fakeCfg swrvetest.Config, cfg swrve.Config) *fixture {
	t.Helper()
	f := &fixture{reg: prometheus.NewRegistry()}
	fakeCfg.Observe = func(r swrvetest.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.requests = append(f.requests, r)
	}
	f.fake = swrvetest.NewServer(fakeCfg)
	f.srv = httptest.NewServer(f.fake)
	t.Cleanup(f.srv.Close)
	cfg.URL = f.srv.URL
	if cfg.PushKeys == nil && cfg.PushKeysFile == "" {
		cfg.PushKeys = testKeys
	}
	f.sender = newSender(t, cfg, f.reg)
	return f
}

func newSender(t *testing.T, cfg swrve.Config, reg prometheus.Registerer) *swrve.Sender {
	t.Helper()
	s, err := swrve.New(cfg, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func (f *fixture) seen() []swrvetest.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]swrvetest.Request(nil), f.requests...)
}

// sends reads lockstream_swrve_sends_total for an outcome and error type.
func (f *fixture) sends(t *testing.T, outcome, errorType string) float64 {
	t.Helper()
	return f.counter(t, "lockstream_swrve_sends_total", map[string]string{"outcome": outcome, "error_type": errorType})
}

// counter reads the counter name with exactly the labels want.
func (f *fixture) counter(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if maps.Equal(labels, want) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestSendSent(t *testing.T) {
	t.Parallel()
	f := setup(t, swrvetest.Config{Scale: 0.01}, swrve.Config{})

	res := f.sender.Send(context.Background(), swrve.Push{
		Platform: storage.PlatformAndroid, MessagePrototypeKey: "Hello", PushKey: "device-7", Message: "Grüße & hi=1",
	})
	if res.Outcome != notifier.Sent || res.HTTPStatus != http.StatusOK || res.Err != nil || res.ErrorType != "" {
		t.Fatalf("Send = %+v, want Sent 200", res)
	}
	if res.Duration <= 0 {
		t.Errorf("Duration = %s, want > 0", res.Duration)
	}
	if res.AnswerCode != 200 || res.AnswerMessage != "OK" {
		t.Errorf("answer = %d %q, want Swrve's 200 \"OK\"", res.AnswerCode, res.AnswerMessage)
	}
	want := swrvetest.Request{PushKey: "campaign-hello-android", User: "device-7", Message: "Grüße & hi=1"}
	if got := f.seen(); len(got) != 1 || got[0] != want {
		t.Fatalf("Swrve saw %+v, want [%+v]", got, want)
	}
	if got := f.sends(t, "sent", ""); got != 1 {
		t.Errorf("sends_total{sent} = %v, want 1", got)
	}
	if got := gaugeValue(t, f.reg, "lockstream_swrve_pool_size"); got != 600 {
		t.Errorf("pool_size = %v, want 600 (300/s × 2s)", got)
	}
}

// gaugeValue reads the gauge called name from reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

func TestSendMissingMappingMakesNoRequest(t *testing.T) {
	t.Parallel()
	f := setup(t, swrvetest.Config{Scale: 0.01}, swrve.Config{})
	for _, p := range []swrve.Push{
		{Platform: storage.PlatformIOS, MessagePrototypeKey: "Goodbye", PushKey: "d", Message: "m"},
		{Platform: storage.PlatformAndroid, MessagePrototypeKey: "sensor.connection_lost", PushKey: "d", Message: "m"},
		{Platform: "WINDOWS", MessagePrototypeKey: "Hello", PushKey: "d", Message: "m"},
	} {
		res := f.sender.Send(context.Background(), p)
		if res.Outcome != notifier.Failed || res.ErrorType != swrve.ErrorTypeMessagePrototypeKey || res.Err == nil ||
			!strings.Contains(res.Err.Error(), p.MessagePrototypeKey) {
			t.Errorf("Send(%+v) = %+v, want Failed %s naming the prototype", p, res, swrve.ErrorTypeMessagePrototypeKey)
		}
	}
	if st := f.fake.Stats(); st.Total != 0 {
		t.Fatalf("Swrve got %d requests, want none", st.Total)
	}
	if got := f.sends(t, "failed", swrve.ErrorTypeMessagePrototypeKey); got != 3 {
		t.Errorf("sends_total{failed,MESSAGE_PROTOTYPE_KEY} = %v, want 3", got)
	}
}

func TestSendIncompletePushIsOther(t *testing.T) {
	t.Parallel()
	f := setup(t, swrvetest.Config{Scale: 0.01}, swrve.Config{})
	for _, p := range []swrve.Push{
		{Platform: storage.PlatformIOS, MessagePrototypeKey: "Hello", Message: "no device"},
		{Platform: storage.PlatformIOS, MessagePrototypeKey: "Hello", PushKey: "d"},
	} {
		if res := f.sender.Send(context.Background(), p); res.Outcome != notifier.Failed || res.ErrorType != swrve.ErrorTypeOther {
			t.Errorf("Send(%+v) = %+v, want Failed %s", p, res, swrve.ErrorTypeOther)
		}
	}
	if st := f.fake.Stats(); st.Total != 0 {
		t.Fatalf("Swrve got %d requests, want none", st.Total)
	}
}

// TestSend503ThenOK is the caller's retry: three 503s come back as Retry, the
// fourth attempt is Sent.
func TestSend503ThenOK(t *testing.T) {
	t.Parallel()
	f := setup(t, swrvetest.Config{Scale: 0.01}, swrve.Config{})
	f.fake.FailNext(3, http.StatusServiceUnavailable, 0)

	for attempt := 1; attempt <= 3; attempt++ {
		res := f.sender.Send(context.Background(), hello)
		if res.Outcome != notifier.Retry || res.HTTPStatus != 503 || res.ErrorType != swrve.ErrorTypeSwrve {
			t.Fatalf("attempt %d = %+v, want Retry 503 %s", attempt, res, swrve.ErrorTypeSwrve)
		}
		var apiErr *swrve.APIError
		if !errors.As(res.Err, &apiErr) || apiErr.Code != 503 || apiErr.Message != "Service Unavailable" {
			t.Fatalf("attempt %d error = %#v, want APIError with Swrve's code 503 and message", attempt, res.Err)
		}
		if res.AnswerCode != 503 || res.AnswerMessage != "Service Unavailable" {
			t.Fatalf("attempt %d answer = %d %q, want Swrve's 503 and message", attempt, res.AnswerCode, res.AnswerMessage)
		}
	}
	if res := f.sender.Send(context.Background(), hello); res.Outcome != notifier.Sent {
		t.Fatalf("attempt 4 = %+v, want Sent", res)
	}
	if st := f.fake.Stats(); st.Total != 4 || st.OK != 1 {
		t.Fatalf("Swrve stats = %+v, want 4 requests, 1 OK", st)
	}
	if got := f.sends(t, "retry", swrve.ErrorTypeSwrve); got != 3 {
		t.Errorf("sends_total{retry,SWRVE} = %v, want 3", got)
	}
}

func TestSendClassifiesStatuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status     int
		retryAfter time.Duration
		outcome    notifier.Outcome
		errorType  string
	}{
		{429, 7 * time.Second, notifier.Retry, swrve.ErrorTypeSwrve},
		{500, 0, notifier.Retry, swrve.ErrorTypeSwrve},
		{502, 0, notifier.Retry, swrve.ErrorTypeSwrve},
		{504, 2 * time.Second, notifier.Retry, swrve.ErrorTypeSwrve},
		{400, 0, notifier.Failed, swrve.ErrorTypeSwrve},
		{403, 0, notifier.Failed, swrve.ErrorTypeSwrve},
		{404, 0, notifier.Failed, swrve.ErrorTypeSwrve},
		{408, 0, notifier.Failed, swrve.ErrorTypeSwrve},
		{501, 0, notifier.Failed, swrve.ErrorTypeSwrve},
		{302, 0, notifier.Failed, swrve.ErrorTypeOther},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			t.Parallel()
			f := setup(t, swrvetest.Config{Scale: 0.01}, swrve.Config{})
			f.fake.FailNext(1, tc.status, tc.retryAfter)
			res := f.sender.Send(context.Background(), hello)
			if res.Outcome != tc.outcome || res.ErrorType != tc.errorType || res.HTTPStatus != tc.status || res.RetryAfter != tc.retryAfter {
				t.Fatalf("Send = %+v, want %s %s status %d Retry-After %s", res, tc.outcome, tc.errorType, tc.status, tc.retryAfter)
			}
			var apiErr *swrve.APIError
			if !errors.As(res.Err, &apiErr) || apiErr.HTTPStatus != tc.status || apiErr.Code != tc.status || apiErr.Message == "" {
				t.Fatalf("error = %#v, want APIError with Swrve's code and message", res.Err)
			}
			code := strconv.Itoa(tc.status)
			if got := f.counter(t, "lockstream_swrve_responses_total", map[string]string{"code": code}); got != 1 {
				t.Errorf("responses_total{code=%q} = %v, want 1", code, got)
			}
		})
	}
}

// TestSendNonJSONError keeps the start of a body that is not Swrve's JSON.
func TestSendNonJSONError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
		http.Error(w, "<html>upstream down</html>", http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	s := newSender(t, swrve.Config{URL: srv.URL, PushKeys: testKeys}, prometheus.NewRegistry())
	res := s.Send(context.Background(), hello)
	var apiErr *swrve.APIError
	if res.Outcome != notifier.Retry || !errors.As(res.Err, &apiErr) || apiErr.Code != 0 ||
		apiErr.Message != "<html>upstream down</html>" {
		t.Fatalf("Send = %+v, want Retry with the body quoted", res)
	}
	if res.AnswerCode != 0 || res.AnswerMessage != "<html>upstream down</html>" {
		t.Errorf("answer = %d %q, want no code and the body quoted", res.AnswerCode, res.AnswerMessage)
	}
	if res.RetryAfter < 58*time.Minute || res.RetryAfter > time.Hour {
		t.Errorf("RetryAfter = %s from an HTTP date an hour ahead, want about 1h", res.RetryAfter)
	}
}

func TestSendTimeoutAndConnectionErrorsRetry(t *testing.T) {
	t.Parallel()
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		// Scale 100: the fastest answer takes 10 s, far beyond the Timeout.
		f := setup(t, swrvetest.Config{Scale: 100}, swrve.Config{Timeout: 50 * time.Millisecond})
		if res := f.sender.Send(context.Background(), hello); res.Outcome != notifier.Retry || res.ErrorType != swrve.ErrorTypeTimeout {
			t.Fatalf("Send = %+v, want Retry %s", res, swrve.ErrorTypeTimeout)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		s := newSender(t, swrve.Config{URL: url, PushKeys: testKeys}, prometheus.NewRegistry())
		if res := s.Send(context.Background(), hello); res.Outcome != notifier.Retry || res.ErrorType != swrve.ErrorTypeConnection {
			t.Fatalf("Send = %+v, want Retry %s", res, swrve.ErrorTypeConnection)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		f := setup(t, swrvetest.Config{Scale: 100}, swrve.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan notifier.Result)
		go func() { done <- f.sender.Send(ctx, hello) }()
		waitFor(t, "the request to reach Swrve", func() bool { return f.fake.Stats().Total == 1 })
		cancel()
		if res := <-done; res.Outcome != notifier.Retry || res.ErrorType != swrve.ErrorTypeCanceled {
			t.Fatalf("Send = %+v, want Retry %s", res, swrve.ErrorTypeCanceled)
		}
	})
}

// TestSendWaitsForPool fills a pool of one: the next send waits, ends as BUSY
// when its ctx ends first, and goes through once the slot is free.
func TestSendWaitsForPool(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	fake := swrvetest.NewServer(swrvetest.Config{Scale: 0.01})
	var entered sync.WaitGroup
	entered.Add(1)
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { entered.Done(); <-release })
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	reg := prometheus.NewRegistry()
	// 10/s × 100 ms: a pool of one.
	s := newSender(t, swrve.Config{URL: srv.URL, PushKeys: testKeys, Rate: 10, ExpectedLatency: 100 * time.Millisecond}, reg)
	if s.PoolSize() != 1 {
		t.Fatalf("PoolSize = %d, want 1", s.PoolSize())
	}

	first := make(chan notifier.Result)
	go func() { first <- s.Send(context.Background(), hello) }()
	entered.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if res := s.Send(ctx, hello); res.Outcome != notifier.Retry || res.ErrorType != swrve.ErrorTypeBusy {
		t.Fatalf("Send with a full pool = %+v, want Retry %s", res, swrve.ErrorTypeBusy)
	}

	second := make(chan notifier.Result)
	go func() { second <- s.Send(context.Background(), hello) }()
	waitFor(t, "the second send to wait", func() bool {
		return gaugeValue(t, reg, "lockstream_swrve_waiting_sends") == 1
	})
	if got := fake.Stats().Total; got != 0 {
		t.Fatalf("Swrve got %d requests while the first was held, want 0", got)
	}
	close(release)
	for _, ch := range []chan notifier.Result{first, second} {
		if res := <-ch; res.Outcome != notifier.Sent {
			t.Fatalf("Send = %+v, want Sent", res)
		}
	}
	if st := fake.Stats(); st.Total != 2 || st.MaxConcurrent != 1 {
		t.Fatalf("Swrve stats = %+v, want 2 requests, one at a time", st)
	}
}

func TestNotifications(t *testing.T) {
	t.Parallel()
	f := setup(t, swrvetest.Config{Scale: 0.01}, swrve.Config{})
	one, zero := 1, 0
	n := notifier.Notification{ID: "n1", EventID: "e1", Type: "state_changed", SensorID: "s1",
		SensorAddress: "Main St 1", Data: &one, Previous: &zero, At: time.Now(), Attempt: 1}
	target := storage.PushTarget{Platform: storage.PlatformAndroid, PushKey: "device-9"}

	if res := f.sender.Notifications().Send(context.Background(), target, n); res.Outcome != notifier.Sent {
		t.Fatalf("Send = %+v, want Sent", res)
	}
	want := swrvetest.Request{PushKey: "campaign-state-android", User: "device-9", Message: "Sensor s1 (Main St 1) is now locked"}
	if got := f.seen(); len(got) != 1 || got[0] != want {
		t.Fatalf("Swrve saw %+v, want [%+v]", got, want)
	}

	// No mapping for sensor.connection_lost.
	n.Type = "connection_lost"
	if res := f.sender.Notifications().Send(context.Background(), target, n); res.Outcome != notifier.Failed ||
		res.ErrorType != swrve.ErrorTypeMessagePrototypeKey || !strings.Contains(res.Err.Error(), "sensor.connection_lost") {
		t.Fatalf("Send(connection_lost) = %+v, want Failed %s", res, swrve.ErrorTypeMessagePrototypeKey)
	}
}

func TestMessage(t *testing.T) {
	t.Parallel()
	one, zero := 1, 0
	for _, tc := range []struct {
		n    notifier.Notification
		want string
	}{
		{notifier.Notification{Type: "state_changed", SensorID: "s1", SensorAddress: "Main St 1", Data: &zero},
			"Sensor s1 (Main St 1) is now unlocked"},
		{notifier.Notification{Type: "state_changed", SensorID: "s1", Data: &one}, "Sensor s1 is now locked"},
		{notifier.Notification{Type: "connection_lost", SensorID: "s1", Data: &one},
			"Sensor s1 lost its connection; last known state: locked"},
		{notifier.Notification{Type: "connection_lost", SensorID: "s1"}, "Sensor s1 lost its connection"},
		{notifier.Notification{Type: "connection_restored", SensorID: "s1", SensorAddress: "Gate", Data: &zero},
			"Sensor s1 (Gate) is reporting again; it is unlocked"},
		{notifier.Notification{Type: "sensor_open_too_long", SensorID: "s1", Data: &zero, Severity: "critical"},
			"Critical: Sensor s1 has been unlocked for too long"},
	} {
		if got := swrve.Message(tc.n); got != tc.want {
			t.Errorf("Message(%+v) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (swrve.Config{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		cfg  swrve.Config
		want string
	}{
		{swrve.Config{URL: "service.swrve.com/push"}, "URL"},
		{swrve.Config{URL: "ftp://x/push"}, "URL"},
		{swrve.Config{Rate: 0.5}, "Rate"},
		{swrve.Config{Rate: 1}, "Rate"},
		{swrve.Config{Rate: -3}, "Rate"},
		{swrve.Config{ExpectedLatency: -time.Second}, "ExpectedLatency"},
		{swrve.Config{Timeout: -time.Second}, "Timeout"},
		{swrve.Config{MaxResponseBytes: -1}, "MaxResponseBytes"},
		{swrve.Config{PushKeysFile: "k.yaml", PushKeys: testKeys}, "PushKeysFile and PushKeys"},
	} {
		err := tc.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
		if _, err := swrve.New(tc.cfg, prometheus.NewRegistry(), nil); err == nil {
			t.Errorf("New(%+v) succeeded, want an error", tc.cfg)
		}
	}
	if _, err := swrve.New(swrve.Config{PushKeysFile: writeFile(t, "bad.yaml", "swrve: {}\n")}, prometheus.NewRegistry(), nil); err == nil ||
		!strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("New with a bad keys file: %v, want an error naming it", err)
	}
	path := writeFile(t, "keys.yaml", "swrve:\n  messagePrototypePushKeys:\n    Hello:\n      IOS: k\n")
	s, err := swrve.New(swrve.Config{PushKeysFile: path}, prometheus.NewRegistry(), nil)
	if err != nil || s.PoolSize() != 600 {
		t.Fatalf("New with a keys file = %v, %v; want a Sender with a pool of 600", s, err)
	}
}

// waitFor polls cond until it holds, failing the test after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
