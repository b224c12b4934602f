package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// waitLimit bounds every wait of the end-to-end tests: generous, for a loaded
// 2-core machine; the tests poll and return as soon as the condition holds.
const waitLimit = 90 * time.Second

// TestAllEndToEnd runs `lockstream all` in-process against real stores and a kfake
// broker and follows one sensor through the whole pipeline: a reading posted to the
// ingest API becomes a state change, a signed webhook and an email; silence becomes
// exactly one connection_lost, the next reading exactly one connection_restored, all
// on lockstream.events and at the client.
func TestAllEndToEnd(t *testing.T) {
	stores := storagetest.New(t)
	kafka := streamtest.Config(t, 3)
	hooks := newWebhookSink(t)
	mail := newMailSink(t)
	addr := freeAddr(t)
	const adminToken, ingestToken = "e2e-admin-token", "e2e-ingest-token"

	for k, v := range map[string]string{
		"LOCKSTREAM_PG_URL":                   stores.PostgresURL,
		"LOCKSTREAM_CLICKHOUSE_URL":           stores.ClickHouseURL,
		"LOCKSTREAM_REDIS_URL":                stores.RedisURL,
		"LOCKSTREAM_REDIS_PREFIX":             stores.RedisPrefix,
		"LOCKSTREAM_KAFKA_BROKERS":            strings.Join(kafka.Brokers, ","),
		"LOCKSTREAM_KAFKA_TOPIC_PREFIX":       kafka.TopicPrefix,
		"LOCKSTREAM_KAFKA_PARTITIONS":         "3",
		"LOCKSTREAM_HTTP_ADDR":                addr,
		"LOCKSTREAM_ADMIN_TOKEN":              adminToken,
		"LOCKSTREAM_INGEST_TOKEN":             ingestToken,
		"LOCKSTREAM_HEARTBEAT_TIMEOUT":        "5s",
		"LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL": "200ms",
		"LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE":    "true",
		"LOCKSTREAM_RETRY_BACKOFF_BASE":       "100ms",
		"LOCKSTREAM_SMTP_URL":                 "smtp://" + mail.addr,
		"LOCKSTREAM_DATA_DIR":                 t.TempDir(),
		"LOCKSTREAM_SHUTDOWN_DELAY":           "0s", // stopped by the test: nobody to drain for
	} {
		t.Setenv(k, v)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"all"}, io.Discard, &logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-exited:
			if code != 0 {
				t.Errorf("lockstream all exited %d after cancel; log:\n%s", code, logs.String())
			}
		case <-time.After(waitLimit):
			t.Errorf("lockstream all did not stop within %v of cancel", waitLimit)
		}
	})

	api := "http://" + addr
	waitUntil(t, "the API is ready", func() bool {
		resp, err := http.Get(api + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	call := func(method, path, token string, body any, wantStatus int) map[string]any {
		t.Helper()
		var payload io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			payload = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, api+path, payload)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != wantStatus {
			t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, wantStatus, raw)
		}
		out := map[string]any{}
		_ = json.Unmarshal(raw, &out)
		return out
	}

	const sensor = "e2eFrontDoor"
	call("POST", "/v1/sensors", adminToken, map[string]any{"id": sensor, "address": "1 Test Street"}, http.StatusCreated)
	client := call("POST", "/v1/clients", adminToken, map[string]any{
		"name": "E2E", "webhook_url": hooks.server.URL + "/hook", "email": "owner@example.com",
	}, http.StatusCreated)
	clientID, secret := client["id"].(string), client["secret"].(string)
	hooks.setSecret(secret)
	call("PUT", "/v1/clients/"+clientID+"/sensors/"+sensor, adminToken, nil, http.StatusNoContent)

	// A first reading: a change from unknown, delivered as a webhook and an email.
	call("POST", "/v1/readings", ingestToken, map[string]any{"sensor_id": sensor, "data": 1}, http.StatusAccepted)
	first := hooks.next(t, "state_changed")
	if first.Sensor.ID != sensor || first.Sensor.Address != "1 Test Street" || first.Data == nil || *first.Data != 1 || first.Previous != nil {
		t.Fatalf("first webhook: %+v", first)
	}
	// Online until the heartbeat timeout (5 s) after the reading: read before
	// waiting for the email, which may take longer than that on a loaded
	// machine.
	waitUntil(t, "GET /v1/sensors shows the state and an online connection", func() bool {
		s := call("GET", "/v1/sensors/"+sensor, adminToken, nil, http.StatusOK)
		return s["data"] == float64(1) && s["connection"] == "online"
	})
	if msg := mail.next(t); !strings.Contains(msg, sensor) || !strings.Contains(msg, "locked") {
		t.Fatalf("email does not name the sensor and its state:\n%s", msg)
	}

	// Silence: one connection_lost, and the sensor is listed as lost.
	lost := hooks.next(t, "connection_lost")
	if lost.Sensor.ID != sensor {
		t.Fatalf("connection_lost webhook: %+v", lost)
	}
	page := call("GET", "/v1/sensors?connection=lost", adminToken, nil, http.StatusOK)
	if items, _ := page["items"].([]any); len(items) != 1 {
		t.Fatalf("lost sensors: %v", page)
	}

	// The next reading: one connection_restored, then the change.
	call("POST", "/v1/readings", ingestToken, []map[string]any{{"sensor_id": sensor, "data": 0}}, http.StatusAccepted)
	// From here on it keeps reporting (the same state: no event), so it is not
	// lost again while the checks below count exactly one loss.
	keepReporting(t, api+"/v1/readings", ingestToken, sensor, 0, time.Second)
	hooks.next(t, "connection_restored")
	changed := hooks.next(t, "state_changed")
	if changed.Data == nil || *changed.Data != 0 || changed.Previous == nil || *changed.Previous != 1 {
		t.Fatalf("second change: %+v", changed)
	}

	// Every event is on lockstream.events, each type exactly once for this sensor.
	var counts map[event.Type]int
	waitUntil(t, "the events topic holds 2 changes, 1 loss and 1 restore", func() bool {
		counts = map[event.Type]int{}
		for _, r := range streamtest.ReadAll(t, kafka, kafka.EventsTopic()) {
			e, err := event.Decode(r.Value)
			if err != nil {
				t.Fatalf("bad event on the topic: %v", err)
			}
			if e.SensorID == sensor {
				counts[e.Type]++
			}
		}
		return counts[event.StateChanged] == 2 && counts[event.ConnectionLost] == 1 && counts[event.ConnectionRestored] == 1
	})
	// The deliveries API shows what the client got: every webhook SENT, with its attempt.
	var deliveries map[string]any
	waitUntil(t, "the deliveries API lists 4 sent webhooks", func() bool {
		deliveries = call("GET", "/v1/clients/"+clientID+"/deliveries?status=SENT", adminToken, nil, http.StatusOK)
		sentWebhooks := 0
		for _, item := range deliveries["items"].([]any) {
			if item.(map[string]any)["channel"] == "webhook" {
				sentWebhooks++
			}
		}
		return sentWebhooks == 4
	})
	first0 := deliveries["items"].([]any)[0].(map[string]any)
	call("POST", "/v1/deliveries/"+first0["id"].(string)+"/retry", adminToken, nil, http.StatusConflict)

	// The client heard of each once: no duplicate webhook ids.
	if dup := hooks.duplicates(); len(dup) > 0 {
		t.Fatalf("webhooks delivered more than once: %v", dup)
	}
}

// webhookSink is a client system: it verifies every webhook's signature and hands
// them to the test in arrival order.
type webhookSink struct {
	server *httptest.Server
	mu     sync.Mutex
	secret string
	seen   map[string]int
	got    chan webhook.Body
	bad    chan error
}

func newWebhookSink(t *testing.T) *webhookSink {
	s := &webhookSink{seen: map[string]int{}, got: make(chan webhook.Body, 100), bad: make(chan error, 100)}
	s.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		secret := s.secret
		s.seen[r.Header.Get(webhook.HeaderID)]++
		s.mu.Unlock()
		if err := webhook.Verify(secret, r.Header, body, 0); err != nil {
			s.bad <- err
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var b webhook.Body
		if err := json.Unmarshal(body, &b); err != nil {
			s.bad <- err
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		s.got <- b
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.server.Close)
	return s
}

func (s *webhookSink) setSecret(secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secret = secret
}

// next returns the next webhook, which must be of type want.
func (s *webhookSink) next(t *testing.T, want string) webhook.Body {
	t.Helper()
	select {
	case b := <-s.got:
		if string(b.Type) != want {
			t.Fatalf("next webhook is %s (%+v), want %s", b.Type, b, want)
		}
		return b
	case err := <-s.bad:
		t.Fatalf("a webhook failed verification: %v", err)
	case <-time.After(waitLimit):
		t.Fatalf("no %s webhook within %v", want, waitLimit)
	}
	return webhook.Body{}
}

func (s *webhookSink) duplicates() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	dup := map[string]int{}
	for id, n := range s.seen {
		if n > 1 {
			dup[id] = n
		}
	}
	return dup
}

// mailSink is an in-process SMTP server that hands each message to the test.
type mailSink struct {
	addr string
	got  chan string
}

func newMailSink(t *testing.T) *mailSink {
	m := &mailSink{got: make(chan string, 100)}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &mailSession{sink: m}, nil }))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return m
}

func (m *mailSink) next(t *testing.T) string {
	t.Helper()
	select {
	case msg := <-m.got:
		return msg
	case <-time.After(waitLimit):
		t.Fatalf("no email within %v", waitLimit)
	}
	return ""
}

type mailSession struct{ sink *mailSink }

func (s *mailSession) Mail(string, *smtp.MailOptions) error { return nil }
func (s *mailSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (s *mailSession) Reset()                               {}
func (s *mailSession) Logout() error                        { return nil }
func (s *mailSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.sink.got <- string(b)
	return nil
}

// freeAddr returns a loopback address nothing listens on right now, and none
// it returned before in this test binary: a port closed right away may be
// handed out again, and two processes of one test given the same one fail.
func freeAddr(t testing.TB) string {
	t.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		if _, taken := handedOut.LoadOrStore(addr, true); !taken {
			return addr
		}
	}
}

// handedOut holds the addresses freeAddr returned (test plumbing shared by
// the package's parallel tests).
var handedOut sync.Map

// waitUntil polls cond until it holds, failing the test after waitLimit.
// keepReporting posts a reading of sensor with data to url every interval
// until the test ends, so that the sensor stays online.
func keepReporting(t *testing.T, url, token, sensor string, data int, interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			body := strings.NewReader(fmt.Sprintf(`{"sensor_id":%q,"data":%d}`, sensor, data))
			if req, err := http.NewRequestWithContext(ctx, "POST", url, body); err == nil {
				req.Header.Set("Authorization", "Bearer "+token)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", waitLimit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for the daemons' concurrent log writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
