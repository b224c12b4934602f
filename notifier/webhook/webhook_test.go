package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/webhook"
)

// waitFor bounds every wait in these tests: generous, for a loaded 2-core machine.
const waitFor = 60 * time.Second

func intp(v int) *int { return &v }

func testNotification() notifier.Notification {
	return notifier.Notification{
		ID:            "notif-1",
		EventID:       "0123456789abcdef0123456789abcdef",
		Type:          "state_changed",
		SensorID:      "xa7v9Dfadr7H",
		SensorAddress: "Main St 1, back door",
		Data:          intp(1),
		Previous:      intp(0),
		At:            time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
		Attempt:       3,
	}
}

func newSender(t *testing.T, cfg webhook.Config) *webhook.Sender {
	t.Helper()
	s, err := webhook.New(cfg, nil)
	if err != nil {
		t.Fatalf("webhook.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// received is one request as a test server saw it.
type received struct {
	header http.Header
	body   []byte
}

// recordingServer answers every request with handler after recording it.
func recordingServer(t *testing.T, handler http.HandlerFunc) (*httptest.Server, <-chan received) {
	t.Helper()
	got := make(chan received, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("reading request body: %v", err)
		}
		got <- received{header: r.Header.Clone(), body: body}
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestSendSignsStandardWebhook(t *testing.T) {
	t.Parallel()
	srv, got := recordingServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s := newSender(t, webhook.Config{AllowPrivate: true})
	secret := webhook.NewSecret()
	n := testNotification()

	res := s.Send(t.Context(), webhook.Target{URL: srv.URL + "/hook", Secret: secret}, n)
	if res.Outcome != notifier.Sent || res.Err != nil || res.HTTPStatus != http.StatusNoContent {
		t.Fatalf("result = %+v, want Sent with 204", res)
	}
	req := <-got

	// The library's own check.
	if err := webhook.Verify(secret, req.header, req.body, time.Minute); err != nil {
		t.Fatalf("Verify: %v", err)
	}

	// An independent computation, straight from the spec: HMAC-SHA256 keyed with the
	// base64-decoded part of the secret, over "id.timestamp.body", base64-encoded.
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatalf("decoding secret: %v", err)
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", req.header.Get("webhook-id"), req.header.Get("webhook-timestamp"), req.body)
	if want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); req.header.Get("webhook-signature") != want {
		t.Errorf("webhook-signature = %q, want %q", req.header.Get("webhook-signature"), want)
	}

	if id := req.header.Get("webhook-id"); id != n.EventID {
		t.Errorf("webhook-id = %q, want the event id %q", id, n.EventID)
	}
	ts, err := strconv.ParseInt(req.header.Get("webhook-timestamp"), 10, 64)
	if err != nil || ts <= 0 {
		t.Errorf("webhook-timestamp = %q, want unix seconds", req.header.Get("webhook-timestamp"))
	}
	if ct := req.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}

	var body map[string]any
	if err := json.Unmarshal(req.body, &body); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, req.body)
	}
	want := map[string]any{
		"id":       n.EventID,
		"type":     "state_changed",
		"sensor":   map[string]any{"id": "xa7v9Dfadr7H", "address": "Main St 1, back door"},
		"data":     1.0,
		"previous": 0.0,
		"at":       "2026-11-22T10:00:00Z",
		"severity": "info",
		"attempt":  3.0,
	}
	if fmt.Sprint(body) != fmt.Sprint(want) {
		t.Errorf("body = %v\nwant   %v", body, want)
	}

	// A first reading has no previous state: null, not absent.
	first := n
	first.Previous = nil
	if res := s.Send(t.Context(), webhook.Target{URL: srv.URL, Secret: secret}, first); res.Outcome != notifier.Sent {
		t.Fatalf("result = %+v", res)
	}
	if req := <-got; !strings.Contains(string(req.body), `"previous":null`) {
		t.Errorf("body %s lacks \"previous\":null", req.body)
	}
}

func TestSignMatchesSpecVector(t *testing.T) {
	t.Parallel()
	// The test vector of the Standard Webhooks reference libraries.
	sig, err := webhook.Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; sig != want {
		t.Errorf("Sign = %q, want %q", sig, want)
	}
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	body := []byte(`{"id":"e1"}`)
	headers := func(ts time.Time, sig string) http.Header {
		h := http.Header{}
		h.Set("webhook-id", "e1")
		h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
		h.Set("webhook-signature", sig)
		return h
	}
	sign := func(secret string, ts time.Time, body []byte) string {
		sig, err := webhook.Sign(secret, "e1", ts, body)
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
	now := time.Now()
	good := sign(secret, now, body)

	if err := webhook.Verify(secret, headers(now, good), body, 0); err != nil {
		t.Fatalf("valid webhook: %v", err)
	}
	// During a secret rotation the header carries several signatures.
	rotated := sign(webhook.NewSecret(), now, body) + " v1a,bm90IGEgc2lnbmF0dXJl " + good
	if err := webhook.Verify(secret, headers(now, rotated), body, 0); err != nil {
		t.Errorf("valid signature among several: %v", err)
	}

	cases := []struct {
		name    string
		secret  string
		headers http.Header
		body    []byte
		want    error
	}{
		{"tampered body", secret, headers(now, good), []byte(`{"id":"e2"}`), webhook.ErrSignature},
		{"other secret", webhook.NewSecret(), headers(now, good), body, webhook.ErrSignature},
		{"other id", secret, func() http.Header { h := headers(now, good); h.Set("webhook-id", "e2"); return h }(), body, webhook.ErrSignature},
		{"stale", secret, headers(now.Add(-10*time.Minute), sign(secret, now.Add(-10*time.Minute), body)), body, webhook.ErrTimestamp},
		{"future", secret, headers(now.Add(10*time.Minute), sign(secret, now.Add(10*time.Minute), body)), body, webhook.ErrTimestamp},
		{"missing signature", secret, headers(now, ""), body, nil},
		{"not base64 secret", "whsec_!!!", headers(now, good), body, nil},
	}
	for _, tc := range cases {
		err := webhook.Verify(tc.secret, tc.headers, tc.body, 5*time.Minute)
		if err == nil {
			t.Errorf("%s: Verify accepted it", tc.name)
			continue
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: Verify = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestSendClassifiesStatuses(t *testing.T) {
	t.Parallel()
	retryAt := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	cases := []struct {
		status     int
		retryAfter string
		want       notifier.Outcome
		errorType  string
		// minRetry and maxRetry bound Result.RetryAfter.
		minRetry, maxRetry time.Duration
	}{
		{status: 200, want: notifier.Sent},
		{status: 202, want: notifier.Sent},
		{status: 500, want: notifier.Retry, errorType: webhook.ErrorTypeHTTPStatus},
		{status: 502, want: notifier.Retry, errorType: webhook.ErrorTypeHTTPStatus},
		{status: 503, retryAfter: "7", want: notifier.Retry, errorType: webhook.ErrorTypeHTTPStatus, minRetry: 7 * time.Second, maxRetry: 7 * time.Second},
		{status: 503, retryAfter: retryAt, want: notifier.Retry, errorType: webhook.ErrorTypeHTTPStatus, minRetry: 30 * time.Second, maxRetry: 91 * time.Second},
		{status: 408, want: notifier.Retry, errorType: webhook.ErrorTypeHTTPStatus},
		{status: 429, retryAfter: "120", want: notifier.Retry, errorType: webhook.ErrorTypeHTTPStatus, minRetry: 2 * time.Minute, maxRetry: 2 * time.Minute},
		{status: 400, want: notifier.Failed, errorType: webhook.ErrorTypeHTTPStatus},
		{status: 404, want: notifier.Failed, errorType: webhook.ErrorTypeHTTPStatus},
		{status: 410, want: notifier.Failed, errorType: webhook.ErrorTypeHTTPStatus},
		{status: 302, want: notifier.Failed, errorType: webhook.ErrorTypeRedirect},
		{status: 307, want: notifier.Failed, errorType: webhook.ErrorTypeRedirect},
	}
	// The redirect target must never be called.
	var redirected atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { redirected.Add(1) }))
	t.Cleanup(elsewhere.Close)

	s := newSender(t, webhook.Config{AllowPrivate: true})
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d %s", tc.status, tc.retryAfter), func(t *testing.T) {
			t.Parallel()
			srv, got := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				if tc.status >= 300 && tc.status < 400 {
					w.Header().Set("Location", elsewhere.URL)
				}
				w.WriteHeader(tc.status)
				fmt.Fprintf(w, "answer %d", tc.status)
			})
			res := s.Send(t.Context(), webhook.Target{URL: srv.URL, Secret: webhook.NewSecret()}, testNotification())
			<-got
			if res.Outcome != tc.want || res.HTTPStatus != tc.status || res.ErrorType != tc.errorType {
				t.Fatalf("result = %+v (%s), want %s, status %d, error type %q", res, res.Outcome, tc.want, tc.status, tc.errorType)
			}
			if res.RetryAfter < tc.minRetry || res.RetryAfter > tc.maxRetry {
				t.Errorf("RetryAfter = %s, want in [%s, %s]", res.RetryAfter, tc.minRetry, tc.maxRetry)
			}
			if tc.want == notifier.Sent {
				if res.Err != nil {
					t.Errorf("Err = %v on success", res.Err)
				}
				return
			}
			if res.Err == nil || !strings.Contains(res.Err.Error(), strconv.Itoa(tc.status)) ||
				!strings.Contains(res.Err.Error(), fmt.Sprintf("answer %d", tc.status)) {
				t.Errorf("Err = %v, want the status and the start of the body", res.Err)
			}
			if res.Abort {
				t.Error("Abort set without the abort header")
			}
		})
	}
	t.Cleanup(func() {
		if n := redirected.Load(); n != 0 {
			t.Errorf("redirect target was called %d times; redirects must not be followed", n)
		}
	})
}

func TestSendAbortHeader(t *testing.T) {
	t.Parallel()
	s := newSender(t, webhook.Config{AllowPrivate: true})
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusBadRequest} {
		srv, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Webhook-Delivery", "Abort-Message")
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(status)
		})
		res := s.Send(t.Context(), webhook.Target{URL: srv.URL, Secret: webhook.NewSecret()}, testNotification())
		if !res.Abort || res.Outcome != notifier.Failed || res.ErrorType != webhook.ErrorTypeAborted || res.RetryAfter != 0 {
			t.Errorf("status %d with abort header: result = %+v, want Failed, Abort, ABORTED, no RetryAfter", status, res)
		}
	}
	// On success there is nothing to abort.
	srv, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("webhook-delivery", "abort-message")
	})
	if res := s.Send(t.Context(), webhook.Target{URL: srv.URL, Secret: webhook.NewSecret()}, testNotification()); res.Outcome != notifier.Sent || res.Abort {
		t.Errorf("200 with abort header: result = %+v, want Sent without Abort", res)
	}
}

// blockingHandler holds every request until released, the test ends or the
// client gives up, telling entered about each one.
func blockingHandler(t *testing.T) (h http.HandlerFunc, entered <-chan struct{}, release func()) {
	t.Helper()
	in := make(chan struct{}, 64)
	done := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(done) }) }
	t.Cleanup(release)
	return func(w http.ResponseWriter, r *http.Request) {
		in <- struct{}{}
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}, in, release
}

// blockingServer serves a blockingHandler.
func blockingServer(t *testing.T) (srv *httptest.Server, entered <-chan struct{}) {
	t.Helper()
	h, entered, release := blockingHandler(t)
	srv = httptest.NewServer(h)
	// Cleanups run last-in first-out: release the handlers, then close.
	t.Cleanup(srv.Close)
	t.Cleanup(release)
	return srv, entered
}

func TestSendTimesOutOnSlowServer(t *testing.T) {
	t.Parallel()

	t.Run("sender timeout", func(t *testing.T) {
		t.Parallel()
		srv, _ := blockingServer(t)
		s := newSender(t, webhook.Config{AllowPrivate: true, Timeout: 300 * time.Millisecond})
		res := s.Send(t.Context(), webhook.Target{URL: srv.URL, Secret: webhook.NewSecret()}, testNotification())
		if res.Outcome != notifier.Retry || res.ErrorType != webhook.ErrorTypeTimeout || res.HTTPStatus != 0 {
			t.Errorf("result = %+v, want Retry TIMEOUT", res)
		}
	})

	t.Run("ctx deadline", func(t *testing.T) {
		t.Parallel()
		srv, _ := blockingServer(t)
		s := newSender(t, webhook.Config{AllowPrivate: true})
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		res := s.Send(ctx, webhook.Target{URL: srv.URL, Secret: webhook.NewSecret()}, testNotification())
		if res.Outcome != notifier.Retry || res.ErrorType != webhook.ErrorTypeTimeout {
			t.Errorf("result = %+v, want Retry TIMEOUT", res)
		}
	})

	t.Run("ctx cancelled", func(t *testing.T) {
		t.Parallel()
		srv, entered := blockingServer(t)
		s := newSender(t, webhook.Config{AllowPrivate: true})
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			<-entered // a shutdown while the request is in the receiver's hands
			cancel()
		}()
		res := s.Send(ctx, webhook.Target{URL: srv.URL, Secret: webhook.NewSecret()}, testNotification())
		if res.Outcome != notifier.Retry || res.ErrorType != webhook.ErrorTypeCanceled {
			t.Errorf("result = %+v, want Retry CANCELED", res)
		}
	})
}

// TestSendAgainOnAKeptAliveConnectionClosedByTheReceiver: the receiver reads
// the second webhook on a kept-alive connection and closes it without an
// answer (the keep-alive race, seen as EOF). The sender posts it again on a
// new connection, under the same webhook-id, and the attempt succeeds.
func TestSendAgainOnAKeptAliveConnectionClosedByTheReceiver(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv, got := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 2 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			_ = conn.Close()
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	s := newSender(t, webhook.Config{AllowPrivate: true})
	target := webhook.Target{URL: srv.URL + "/hook", Secret: webhook.NewSecret()}
	for i, n := range []notifier.Notification{testNotification(), testNotification()} {
		n.ID, n.EventID = fmt.Sprintf("notif-%d", i+1), fmt.Sprintf("%032x", i+1)
		if res := s.Send(t.Context(), target, n); res.Outcome != notifier.Sent {
			t.Fatalf("webhook %d: result = %+v, want Sent", i+1, res)
		}
	}
	var ids []string
	for range 3 {
		r := <-got
		ids = append(ids, r.header.Get(webhook.HeaderID))
		if key := r.header.Get("Idempotency-Key"); key != r.header.Get(webhook.HeaderID) {
			t.Errorf("Idempotency-Key %q, want the webhook-id %q", key, r.header.Get(webhook.HeaderID))
		}
	}
	if ids[0] == ids[1] || ids[1] != ids[2] || calls.Load() != 3 {
		t.Errorf("the receiver saw webhook-ids %v in %d requests, want the second sent twice", ids, calls.Load())
	}
}

func TestSendConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	s := newSender(t, webhook.Config{AllowPrivate: true})
	res := s.Send(t.Context(), webhook.Target{URL: "http://" + addr + "/hook", Secret: webhook.NewSecret()}, testNotification())
	if res.Outcome != notifier.Retry || res.ErrorType != webhook.ErrorTypeConnection || res.Err == nil {
		t.Errorf("result = %+v, want Retry CONNECTION", res)
	}
}

func TestSendCapsResponseBody(t *testing.T) {
	t.Parallel()
	const (
		limit = 1 << 10
		total = 256 << 20 // far more than any socket buffer holds
		chunk = 64 << 10
	)
	var written atomic.Int64
	handlerDone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(handlerDone)
		w.WriteHeader(http.StatusBadRequest)
		buf := []byte(strings.Repeat("x", chunk))
		for written.Load() < total {
			n, err := w.Write(buf)
			written.Add(int64(n))
			if err != nil {
				return // the sender hung up: what it did not read was never sent
			}
		}
	}))
	t.Cleanup(srv.Close)

	s := newSender(t, webhook.Config{AllowPrivate: true, MaxResponseBytes: limit})
	res := s.Send(t.Context(), webhook.Target{URL: srv.URL, Secret: webhook.NewSecret()}, testNotification())
	if res.Outcome != notifier.Failed || res.HTTPStatus != http.StatusBadRequest {
		t.Fatalf("result = %+v, want Failed 400", res)
	}
	if len(res.Err.Error()) > 1024 {
		t.Errorf("error is %d bytes long; it should quote only the start of the body", len(res.Err.Error()))
	}
	select {
	case <-handlerDone:
	case <-time.After(waitFor):
		t.Fatal("the server is still writing: the sender did not hang up after the cap")
	}
	if n := written.Load(); n >= total {
		t.Errorf("the server wrote its whole %d-byte body: the sender read past the cap", n)
	}
}

func TestPerEndpointConcurrency(t *testing.T) {
	t.Parallel()
	const limit = 2
	slow, entered, release := blockingHandler(t)
	var inHandler, maxInHandler atomic.Int64
	counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inHandler.Add(1)
		defer inHandler.Add(-1)
		for {
			m := maxInHandler.Load()
			if n <= m || maxInHandler.CompareAndSwap(m, n) {
				break
			}
		}
		slow(w, r)
	}))
	t.Cleanup(counted.Close)
	t.Cleanup(release) // runs before counted.Close
	fast, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {})

	s := newSender(t, webhook.Config{AllowPrivate: true, PerEndpointConcurrency: limit})
	target := webhook.Target{URL: counted.URL, Secret: webhook.NewSecret()}

	// limit+1 sends to the blocking endpoint: limit get in, one waits for a slot.
	results := make(chan notifier.Result, limit+1)
	for range limit + 1 {
		go func() { results <- s.Send(t.Context(), target, testNotification()) }()
	}
	for range limit {
		select {
		case <-entered:
		case <-time.After(waitFor):
			t.Fatal("the first sends never reached the endpoint")
		}
	}

	// One more, whose caller gives up while it waits for a slot.
	ctx, cancel := context.WithCancel(t.Context())
	waiting := make(chan notifier.Result, 1)
	go func() { waiting <- s.Send(ctx, target, testNotification()) }()

	// A different endpoint is not held up by the blocked one.
	if res := s.Send(t.Context(), webhook.Target{URL: fast.URL, Secret: webhook.NewSecret()}, testNotification()); res.Outcome != notifier.Sent {
		t.Fatalf("other endpoint: result = %+v, want Sent", res)
	}

	cancel()
	if res := <-waiting; res.Outcome != notifier.Retry || res.ErrorType != webhook.ErrorTypeEndpointBusy {
		t.Errorf("cancelled while waiting: result = %+v, want Retry ENDPOINT_BUSY", res)
	}
	if n := inHandler.Load(); n != limit {
		t.Errorf("%d requests in the handler, want %d", n, limit)
	}

	// Released, the waiting send gets its turn; all complete.
	release()
	for range limit + 1 {
		select {
		case res := <-results:
			if res.Outcome != notifier.Sent {
				t.Errorf("result = %+v, want Sent", res)
			}
		case <-time.After(waitFor):
			t.Fatal("sends did not complete after release")
		}
	}
	if m := maxInHandler.Load(); m != limit {
		t.Errorf("at most %d requests were in the handler at once, want %d", m, limit)
	}
}

func TestSSRFGuard(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}

	// A short timeout bounds the test if the guard ever let a dial through to an
	// unroutable address; with the guard working no dial starts.
	s := newSender(t, webhook.Config{Timeout: 5 * time.Second})
	for _, u := range []string{
		"http://127.0.0.1:" + port + "/",
		"http://localhost:" + port + "/", // a name that resolves to loopback
		"http://169.254.169.254/latest/meta-data/",
		"http://[::1]:" + port + "/",
		"http://[::ffff:127.0.0.1]:" + port + "/",
		"http://10.0.0.1/",
		"http://192.168.1.1/",
		"http://172.16.0.1/",
		"http://100.64.0.1/",
		"http://0.0.0.0:" + port + "/",
		"https://[fd00::1]/",
		"http://[fe80::1]/",
	} {
		res := s.Send(t.Context(), webhook.Target{URL: u, Secret: webhook.NewSecret()}, testNotification())
		if res.Outcome != notifier.Failed || res.ErrorType != webhook.ErrorTypeSSRF || !errors.Is(res.Err, webhook.ErrForbiddenAddress) {
			t.Errorf("%s: result = %+v, want Failed SSRF", u, res)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the loopback server got %d requests; the guard must refuse before connecting", n)
	}

	// The same sender with private addresses allowed reaches it.
	allowed := newSender(t, webhook.Config{AllowPrivate: true})
	if res := allowed.Send(t.Context(), webhook.Target{URL: "http://localhost:" + port + "/", Secret: webhook.NewSecret()}, testNotification()); res.Outcome != notifier.Sent {
		t.Errorf("AllowPrivate: result = %+v, want Sent", res)
	}
}

func TestSendRejectsBadTargets(t *testing.T) {
	t.Parallel()
	s := newSender(t, webhook.Config{AllowPrivate: true})
	for _, tc := range []struct {
		target    webhook.Target
		errorType string
	}{
		{webhook.Target{URL: "ftp://example.com/", Secret: webhook.NewSecret()}, webhook.ErrorTypeInvalidURL},
		{webhook.Target{URL: "/relative", Secret: webhook.NewSecret()}, webhook.ErrorTypeInvalidURL},
		{webhook.Target{URL: "http://", Secret: webhook.NewSecret()}, webhook.ErrorTypeInvalidURL},
		{webhook.Target{URL: "http://example.com/", Secret: "whsec_not base64!"}, webhook.ErrorTypeSecret},
		{webhook.Target{URL: "http://example.com/", Secret: ""}, webhook.ErrorTypeSecret},
	} {
		res := s.Send(t.Context(), tc.target, testNotification())
		if res.Outcome != notifier.Failed || res.ErrorType != tc.errorType || res.Err == nil {
			t.Errorf("%+v: result = %+v, want Failed %s", tc.target, res, tc.errorType)
		}
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	cfg := webhook.Config{}.WithDefaults()
	if cfg.Timeout != webhook.DefaultTimeout || cfg.PerEndpointConcurrency != webhook.DefaultPerEndpointConcurrency ||
		cfg.MaxResponseBytes != webhook.DefaultMaxResponseBytes || cfg.AllowPrivate {
		t.Errorf("defaults = %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	for field, bad := range map[string]webhook.Config{
		"Timeout":                {Timeout: -time.Second},
		"PerEndpointConcurrency": {PerEndpointConcurrency: -1},
		"MaxResponseBytes":       {MaxResponseBytes: -1},
	} {
		_, err := webhook.New(bad, nil)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", bad, err, field)
		}
	}
}
