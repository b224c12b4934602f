package webapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
)

const testToken = "test-admin-token-0123456789abcdef"

// testAPI is a real server on a loopback port, backed by a private, migrated Postgres
// database.
type testAPI struct {
	t        *testing.T
	url      string
	stores   *storagetest.Stores
	registry *prometheus.Registry
	server   *webapi.Server
}

type apiOptions struct {
	// cfg is the server's config; the admin token is always testToken.
	cfg    webapi.Config
	checks map[string]webapi.Pinger
	opts   []webapi.Option
	logger *slog.Logger
	// registry, when set, builds the server's registry in place of the test's
	// Postgres.
	registry func(*testing.T, *storagetest.Stores) webapi.Registry
}

func newTestAPI(t *testing.T, o apiOptions) *testAPI {
	t.Helper()
	stores := storagetest.New(t)
	reg := prometheus.NewRegistry()
	logger := o.logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	checks := o.checks
	if checks == nil {
		checks = map[string]webapi.Pinger{
			"postgres":   stores.Postgres,
			"redis":      stores.Redis,
			"clickhouse": stores.ClickHouse,
		}
	}
	var registry webapi.Registry = stores.Registry
	if o.registry != nil {
		registry = o.registry(t, stores)
	}
	cfg := o.cfg
	cfg.AdminToken = testToken
	server, err := webapi.New(cfg, registry, checks, reg, reg, logger, o.opts...)
	if err != nil {
		t.Fatalf("webapi.New: %v", err)
	}
	ts := httptest.NewServer(server.Handler())
	t.Cleanup(ts.Close)
	return &testAPI{t: t, url: ts.URL, stores: stores, registry: reg, server: server}
}

// response is a read HTTP response.
type response struct {
	t      *testing.T
	status int
	header http.Header
	body   []byte
}

// request sends method path with body (a string is sent verbatim, anything else as
// JSON, nil as no body) and the admin token unless headers say otherwise.
func (a *testAPI) request(method, path string, body any, headers ...string) *response {
	a.t.Helper()
	var reader io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		reader = strings.NewReader(b)
	case []byte:
		reader = bytes.NewReader(b)
	case io.Reader:
		reader = b // length unknown: sent chunked
	default:
		encoded, err := json.Marshal(b)
		if err != nil {
			a.t.Fatalf("encoding request body: %v", err)
		}
		reader = bytes.NewReader(encoded)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.url+path, reader)
	if err != nil {
		a.t.Fatalf("building request: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if reader != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("reading response of %s %s: %v", method, path, err)
	}
	return &response{t: a.t, status: resp.StatusCode, header: resp.Header, body: data}
}

// expect fails the test unless the response has status and, when it has a body, the
// JSON media type that goes with it.
func (r *response) expect(status int) *response {
	r.t.Helper()
	if r.status != status {
		r.t.Fatalf("status = %d, want %d; body: %s", r.status, status, r.body)
	}
	if status == http.StatusNoContent {
		if len(r.body) != 0 {
			r.t.Fatalf("204 with a body: %s", r.body)
		}
		return r
	}
	want := "application/json"
	if status >= 400 {
		want = "application/problem+json"
	}
	if got := r.header.Get("Content-Type"); got != want {
		r.t.Fatalf("Content-Type = %q, want %q; body: %s", got, want, r.body)
	}
	return r
}

// decode decodes the body into v.
func (r *response) decode(v any) {
	r.t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		r.t.Fatalf("decoding %s: %v", r.body, err)
	}
}

// fields returns the body as a map, to check which keys are present at all.
func (r *response) fields() map[string]any {
	r.t.Helper()
	var m map[string]any
	r.decode(&m)
	return m
}

type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Field  string `json:"field"`
		Detail string `json:"detail"`
	} `json:"errors"`
	Checks map[string]string `json:"checks"`
}

// expectProblem checks an error response: status, media type, problem type, a status
// member matching the response, and a detail naming the problem (every one of
// detailParts appears in it).
func (r *response) expectProblem(status int, typ string, detailParts ...string) problemBody {
	r.t.Helper()
	r.expect(status)
	var p problemBody
	r.decode(&p)
	if p.Type != "urn:lockstream:problem:"+typ {
		r.t.Fatalf("problem type = %q, want urn:lockstream:problem:%s; body: %s", p.Type, typ, r.body)
	}
	if p.Status != status || p.Title != http.StatusText(status) {
		r.t.Fatalf("problem status/title = %d %q, want %d %q", p.Status, p.Title, status, http.StatusText(status))
	}
	for _, part := range detailParts {
		if !strings.Contains(p.Detail, part) {
			r.t.Fatalf("problem detail %q does not mention %q", p.Detail, part)
		}
	}
	return p
}

// expectInvalid checks a 422 naming exactly the given fields, in any order.
func (r *response) expectInvalid(fields ...string) problemBody {
	r.t.Helper()
	p := r.expectProblem(http.StatusUnprocessableEntity, "validation")
	var got []string
	for _, e := range p.Errors {
		if e.Detail == "" {
			r.t.Fatalf("field error for %q has no detail", e.Field)
		}
		got = append(got, e.Field)
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(fields))
	if !slices.Equal(got, want) {
		r.t.Fatalf("invalid fields = %v, want %v; body: %s", got, want, r.body)
	}
	return p
}

// sensorJSON is a sensor as the API shows it; pointers tell null.
type sensorJSON struct {
	ID               string     `json:"id"`
	Address          string     `json:"address"`
	Data             *int       `json:"data"`
	ChangedAt        *time.Time `json:"changed_at"`
	LastSeen         *time.Time `json:"last_seen"`
	Connection       string     `json:"connection"`
	HeartbeatTimeout string     `json:"heartbeat_timeout"`
	CreatedAt        time.Time  `json:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
}

type pushTargetJSON struct {
	Platform string `json:"platform"`
	PushKey  string `json:"push_key"`
}

type clientJSON struct {
	ID          string           `json:"id"`
	Name        string           `json:"name"`
	WebhookURL  string           `json:"webhook_url"`
	Email       *string          `json:"email"`
	PushTargets []pushTargetJSON `json:"push_targets"`
	Secret      string           `json:"secret"`
	CreatedAt   time.Time        `json:"created_at"`
	UpdatedAt   time.Time        `json:"updated_at"`
}

type pageJSON[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

func (a *testAPI) createSensor(id, address string) sensorJSON {
	a.t.Helper()
	var s sensorJSON
	a.request("POST", "/v1/sensors", map[string]any{"id": id, "address": address}).expect(http.StatusCreated).decode(&s)
	return s
}

func (a *testAPI) createClient(name string) clientJSON {
	a.t.Helper()
	var c clientJSON
	a.request("POST", "/v1/clients", map[string]any{"name": name, "webhook_url": "https://hooks.example.com/" + name}).
		expect(http.StatusCreated).decode(&c)
	return c
}

// expectUTC fails unless the raw JSON time member is RFC 3339 in UTC.
func expectUTC(t *testing.T, fields map[string]any, names ...string) {
	t.Helper()
	for _, name := range names {
		raw, ok := fields[name].(string)
		if !ok {
			t.Fatalf("%s = %v, want an RFC 3339 string", name, fields[name])
		}
		if _, err := time.Parse(time.RFC3339Nano, raw); err != nil || !strings.HasSuffix(raw, "Z") {
			t.Fatalf("%s = %q, want RFC 3339 in UTC (err %v)", name, raw, err)
		}
	}
}

// insertSensorState writes the row the consumer keeps for a sensor's last reading,
// through the consumer's own store method.
func (a *testAPI) insertSensorState(id string, data int, changedAt time.Time) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return consumer.NewPostgresStore(a.stores.Postgres).ApplyStateChanges(ctx, []consumer.StateChange{{SensorID: id, Data: data, ChangedAt: changedAt}})
}
