package webapi_test

import (
	"bytes"
	"context"
	"errors"
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
	"github.com/redis/go-redis/v9"

	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
)

func TestMalformedBodies(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})
	api.createSensor("s1", "x")

	cases := []struct {
		name, method, path, body string
		detail                   []string
	}{
		{"syntax", "POST", "/v1/sensors", `{"id": "a",}`, []string{"malformed JSON", "byte"}},
		{"truncated", "POST", "/v1/sensors", `{"id": "a"`, []string{"malformed JSON"}},
		{"empty", "POST", "/v1/sensors", ``, []string{"empty"}},
		{"wrong type", "POST", "/v1/sensors", `{"id": 12, "address": "x"}`, []string{`"id"`, "a string", "number"}},
		{"not an object", "POST", "/v1/sensors", `["a"]`, []string{"an object", "array"}},
		{"unknown field", "POST", "/v1/sensors", `{"id": "a", "address": "x", "colour": "red"}`, []string{`"colour"`}},
		{"two values", "POST", "/v1/sensors", `{"id": "a", "address": "x"} {}`, []string{"single JSON value"}},
		{"patch wrong type", "PATCH", "/v1/sensors/s1", `{"heartbeat_timeout": 3600}`, []string{`"heartbeat_timeout"`, "a string"}},
		{"patch unknown field", "PATCH", "/v1/sensors/s1", `{"id": "renamed"}`, []string{`"id"`}},
		{"nested wrong type", "POST", "/v1/clients", `{"name": "n", "webhook_url": "https://h.example", "push_targets": [{"platform": 1}]}`,
			[]string{`"push_targets.platform"`}},
		{"client patch unknown field", "PATCH", "/v1/clients/00000000-0000-7000-8000-000000000000", `{"secret": "mine"}`, []string{`"secret"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			api := *api
			api.t = t
			api.request(c.method, c.path, c.body).expectProblem(http.StatusBadRequest, "malformed-body", c.detail...)
		})
	}

	// Over 1 MiB: 413, for a body that is valid JSON but too long, whether its length
	// is announced (refused before reading) or not (chunked: refused at the limit)...
	big := `{"id": "big", "address": "` + strings.Repeat("a", 1<<20) + `"}`
	api.request("POST", "/v1/sensors", big).expectProblem(http.StatusRequestEntityTooLarge, "body-too-large", "1048576")
	api.request("POST", "/v1/sensors", struct{ io.Reader }{strings.NewReader(big)}).
		expectProblem(http.StatusRequestEntityTooLarge, "body-too-large", "1048576")
	// ... and for an announced oversized body that is not JSON at all.
	api.request("POST", "/v1/sensors", strings.Repeat("a", 2<<20)).
		expectProblem(http.StatusRequestEntityTooLarge, "body-too-large", "1048576")
	api.request("GET", "/v1/sensors/big", nil).expect(http.StatusNotFound)
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})

	for _, c := range []struct {
		name, header string
	}{
		{"missing", ""},
		{"wrong token", "Bearer not-the-token"},
		{"token prefix", "Bearer " + testToken[:10]},
		{"token with suffix", "Bearer " + testToken + "x"},
		{"basic scheme", "Basic " + testToken},
		{"no token", "Bearer "},
	} {
		for _, route := range []struct{ method, path string }{
			{"GET", "/v1/sensors"}, {"POST", "/v1/clients"}, {"DELETE", "/v1/sensors/x"},
		} {
			resp := api.request(route.method, route.path, nil, "Authorization", c.header)
			resp.expectProblem(http.StatusUnauthorized, "unauthorized")
			if got := resp.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Fatalf("%s %s with %s: WWW-Authenticate = %q", route.method, route.path, c.name, got)
			}
		}
	}
	// The scheme is case-insensitive.
	api.request("GET", "/v1/sensors", nil, "Authorization", "bearer "+testToken).expect(http.StatusOK)

	// Probes, metrics and the API description need no token.
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml"} {
		if resp := api.request("GET", path, nil, "Authorization", ""); resp.status != http.StatusOK {
			t.Fatalf("GET %s without token = %d: %s", path, resp.status, resp.body)
		}
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})

	api.request("GET", "/v1/nothing-here", nil).expectProblem(http.StatusNotFound, "not-found", "/v1/nothing-here")
	api.request("GET", "/", nil).expectProblem(http.StatusNotFound, "not-found")

	for _, c := range []struct {
		method, path, allow string
	}{
		{"PUT", "/v1/sensors", "GET, POST"},
		{"POST", "/v1/sensors/abc", "GET, PATCH, DELETE"},
		{"GET", "/v1/clients/x/sensors/y", "PUT, DELETE"},
		{"DELETE", "/healthz", "GET"},
	} {
		resp := api.request(c.method, c.path, nil)
		resp.expectProblem(http.StatusMethodNotAllowed, "method-not-allowed", c.method, c.path)
		if got := strings.Join(resp.header.Values("Allow"), ", "); got != c.allow {
			t.Fatalf("%s %s: Allow = %q, want %q", c.method, c.path, got, c.allow)
		}
	}
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()

	// Every store answers.
	api := newTestAPI(t, apiOptions{})
	var health map[string]string
	api.request("GET", "/healthz", nil).expect(http.StatusOK).decode(&health)
	if health["status"] != "ok" {
		t.Fatalf("healthz = %v", health)
	}
	var ready struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	api.request("GET", "/readyz", nil).expect(http.StatusOK).decode(&ready)
	if ready.Status != "ok" || len(ready.Checks) != 3 || ready.Checks["postgres"] != "ok" ||
		ready.Checks["redis"] != "ok" || ready.Checks["clickhouse"] != "ok" {
		t.Fatalf("readyz = %+v", ready)
	}

	// A real Redis client aimed at a port nobody listens on, and a check that fails.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	deadRedis := redis.NewClient(&redis.Options{Addr: deadAddr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = deadRedis.Close() })

	var logs syncWriter
	down := newTestAPI(t, apiOptions{
		logger: slog.New(slog.NewTextHandler(&logs, nil)),
		checks: map[string]webapi.Pinger{
			"postgres":   api.stores.Postgres,
			"redis":      webapi.PingerFunc(func(ctx context.Context) error { return deadRedis.Ping(ctx).Err() }),
			"clickhouse": webapi.PingerFunc(func(context.Context) error { return errors.New("connection refused") }),
		},
	})
	p := down.request("GET", "/readyz", nil).expectProblem(http.StatusServiceUnavailable, "not-ready", "clickhouse", "redis")
	if strings.Contains(p.Detail, "postgres") {
		t.Fatalf("detail %q names postgres, which is up", p.Detail)
	}
	if p.Checks["postgres"] != "ok" || p.Checks["redis"] != "down" || p.Checks["clickhouse"] != "down" {
		t.Fatalf("checks = %v", p.Checks)
	}
	// The cause is logged, not shown.
	if strings.Contains(string(down.request("GET", "/readyz", nil).body), deadAddr) {
		t.Fatal("readyz body shows the failing address")
	}
	if !strings.Contains(logs.String(), "readiness check failed") || !strings.Contains(logs.String(), deadAddr) {
		t.Fatalf("failure not logged with its cause; logs: %s", logs.String())
	}
}

func TestMetricsByRoutePattern(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})
	api.createSensor("m1", "x")
	api.createSensor("m2", "x")
	api.request("GET", "/v1/sensors/m1", nil).expect(http.StatusOK)
	api.request("GET", "/v1/sensors/m2", nil).expect(http.StatusOK)
	api.request("GET", "/v1/sensors/zz", nil).expect(http.StatusNotFound)
	api.request("GET", "/no/such/route/"+strings.Repeat("x", 40), nil).expect(http.StatusNotFound)

	resp := api.request("GET", "/metrics", nil, "Authorization", "")
	if resp.status != http.StatusOK {
		t.Fatalf("/metrics = %d", resp.status)
	}
	text := string(resp.body)
	for _, want := range []string{
		`lockstream_http_request_duration_seconds_count{code="201",method="POST",route="/v1/sensors"} 2`,
		`lockstream_http_request_duration_seconds_count{code="200",method="GET",route="/v1/sensors/{id}"} 2`,
		`lockstream_http_request_duration_seconds_count{code="404",method="GET",route="/v1/sensors/{id}"} 1`,
		`lockstream_http_request_duration_seconds_count{code="404",method="GET",route="unmatched"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("/metrics lacks %s; got:\n%s", want, grepLines(text, "lockstream_http"))
		}
	}
	for _, raw := range []string{"/v1/sensors/m1", "/no/such/route"} {
		if strings.Contains(text, raw) {
			t.Fatalf("/metrics labels a raw path %s", raw)
		}
	}
}

func grepLines(text, substr string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// syncWriter collects log output written by concurrent request handlers.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func TestInternalErrorIsLoggedNotShown(t *testing.T) {
	t.Parallel()
	// A registry whose pool is closed fails every query, as a lost database would.
	closedRegistry := func(t *testing.T, stores *storagetest.Stores) webapi.Registry {
		closed, err := storage.OpenPostgres(context.Background(), stores.PostgresURL)
		if err != nil {
			t.Fatal(err)
		}
		closed.Close()
		return registry.New(closed)
	}
	var logs syncWriter
	api := newTestAPI(t, apiOptions{registry: closedRegistry, logger: slog.New(slog.NewTextHandler(&logs, nil))})
	p := api.request("GET", "/v1/sensors", nil).expectProblem(http.StatusInternalServerError, "internal", "logged")
	if strings.Contains(p.Detail, "closed") || strings.Contains(p.Detail, "pool") {
		t.Fatalf("500 detail leaks the cause: %q", p.Detail)
	}
	if !strings.Contains(logs.String(), "http request failed") || !strings.Contains(logs.String(), "closed pool") {
		t.Fatalf("cause not logged; logs: %s", logs.String())
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c := webapi.Config{AdminToken: "t"}.WithDefaults()
	if c.Addr != webapi.DefaultAddr || c.ShutdownTimeout != webapi.DefaultShutdownTimeout ||
		c.MaxBodyBytes != webapi.DefaultMaxBodyBytes || c.ReadyTimeout != webapi.DefaultReadyTimeout {
		t.Fatalf("defaults = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for field, bad := range map[string]webapi.Config{
		"AdminToken":      {},
		"Addr":            {AdminToken: "t", Addr: "no-port"},
		"ShutdownTimeout": {AdminToken: "t", ShutdownTimeout: -time.Second},
		"MaxBodyBytes":    {AdminToken: "t", MaxBodyBytes: -1},
	} {
		err := bad.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Fatalf("config with bad %s: err = %v, want one naming it", field, err)
		}
	}
	reg := prometheus.NewRegistry()
	if _, err := webapi.New(webapi.Config{}, nil, nil, reg, reg, slog.New(slog.DiscardHandler)); err == nil ||
		!strings.Contains(err.Error(), "AdminToken") {
		t.Fatalf("New without a token: err = %v", err)
	}
}

// TestNilLogger builds a server with a nil logger and serves a request, which the
// server logs.
func TestNilLogger(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})
	reg := prometheus.NewRegistry()
	server, err := webapi.New(webapi.Config{AdminToken: testToken}, api.stores.Registry, nil, reg, reg, nil)
	if err != nil {
		t.Fatalf("New with a nil logger: %v", err)
	}
	rec := httptest.NewRecorder()
	server.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("healthz = %d, want 200", rec.Code)
	}
}

func TestServeShutsDownCleanly(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})
	reg := prometheus.NewRegistry()
	server, err := webapi.New(webapi.Config{AdminToken: testToken}, api.stores.Registry, nil, reg, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- server.Serve(ctx, ln) }()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	resp, err := client.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz = %d", resp.StatusCode)
	}

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve after cancel = %v, want nil", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Serve did not return after its context was cancelled")
	}
	if _, err := client.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
		t.Fatal("server still answers after shutdown")
	}

	// Run fails, naming the address, when it cannot listen.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	reg = prometheus.NewRegistry()
	server, err = webapi.New(webapi.Config{AdminToken: testToken, Addr: busy.Addr().String()}, api.stores.Registry, nil, reg, reg,
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Run(context.Background()); err == nil || !strings.Contains(err.Error(), busy.Addr().String()) {
		t.Fatalf("Run on a busy address = %v", err)
	}
}

// One middleware guards the three tokens: each opens its own routes only, a request
// without it is a 401 problem naming the token it needs, and a route whose token is
// not configured answers 503 naming the setting.
func TestEachTokenOpensOnlyItsRoutes(t *testing.T) {
	t.Parallel()
	const ingestToken = "test-ingest-token-0011223344556677"
	a := newPushAPI(t, webapi.Config{PushToken: testPushToken, IngestToken: ingestToken}, true)
	tokens := map[string]string{"admin": testToken, "ingest": ingestToken, "push": testPushToken}
	routes := map[string]struct{ method, path string }{
		"admin":  {"GET", "/v1/sensors"},
		"ingest": {"POST", "/v1/readings"},
		"push":   {"GET", "/v1/pushes/0191e7a4-0000-7000-8000-000000000000"},
	}
	for owner, route := range routes {
		for name, token := range tokens {
			resp := a.request(route.method, route.path, nil, "Authorization", "Bearer "+token)
			if name == owner {
				if resp.status == http.StatusUnauthorized {
					t.Fatalf("%s %s with its own %s token: 401 %s", route.method, route.path, name, resp.body)
				}
				continue
			}
			resp.expectProblem(http.StatusUnauthorized, "unauthorized", "not the "+owner+" token")
			if got := resp.header.Get("WWW-Authenticate"); !strings.Contains(got, `error="invalid_token"`) {
				t.Fatalf("%s %s with the %s token: WWW-Authenticate = %q", route.method, route.path, name, got)
			}
		}
		a.request(route.method, route.path, nil, "Authorization", "").
			expectProblem(http.StatusUnauthorized, "unauthorized", "Bearer <"+owner+" token>")
	}

	off := newPushAPI(t, webapi.Config{}, true)
	off.request("POST", "/v1/readings", nil, "Authorization", "Bearer "+ingestToken).
		expectProblem(http.StatusServiceUnavailable, "unavailable", "LOCKSTREAM_INGEST_TOKEN")
	off.request("POST", "/v1/pushes", nil, "Authorization", "Bearer "+testPushToken).
		expectProblem(http.StatusServiceUnavailable, "unavailable", "LOCKSTREAM_PUSH_TOKEN")
}
