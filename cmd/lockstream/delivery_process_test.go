package main

import (
	"bytes"
	"encoding/json"
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

	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// The delivery process tests run `lockstream all` as a process (built by
// lockstreamBinary) against real stores, a kfake broker and httptest sinks, and
// check what becomes of deliveries when receivers fail, refuse, vanish, are not
// allowed, or when the process delivering them is killed.

const (
	deliveryAdminToken  = "delivery-admin-token"
	deliveryIngestToken = "delivery-ingest-token"
)

// deliveryNode is the lockstream processes of one test and their HTTP API.
type deliveryNode struct {
	t     *testing.T
	h     *harness
	api   string
	procs map[string]*proc // the last process started of each subcommand
	// stores are the node's databases, for tests that read them directly.
	stores *storagetest.Stores
	// onCall, when set, is told of every request call makes, with its URL and
	// bearer token, before it is sent.
	onCall func(method, url, token string)
}

// startDeliveryNode starts the lockstream subcommands named (each as a process;
// one of them serves the API: all or api) on fresh stores and a private kfake
// broker, with the settings given (NAME=value) on top of the stores', and waits
// until the API is ready.
func startDeliveryNode(t *testing.T, subcommands []string, settings ...string) *deliveryNode {
	t.Helper()
	stores := storagetest.New(t)
	kafka := privateKafka(t)
	addr := freeAddr(t)
	env := append(storeSettings(kafka, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL, stores.RedisPrefix),
		"LOCKSTREAM_HTTP_ADDR="+addr,
		"LOCKSTREAM_ADMIN_TOKEN="+deliveryAdminToken,
		"LOCKSTREAM_INGEST_TOKEN="+deliveryIngestToken,
		"LOCKSTREAM_HEARTBEAT_TIMEOUT=1h", // no connection_lost events in these tests
		"LOCKSTREAM_DATA_DIR="+t.TempDir(),
	)
	n := &deliveryNode{t: t, h: newHarness(t, append(env, settings...)...), api: "http://" + addr, procs: map[string]*proc{},
		stores: stores}
	for _, sub := range subcommands {
		n.start(sub)
	}
	n.h.waitFor("the API to be ready", func() (bool, string) {
		resp, err := http.Get(n.api + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, "readyz: " + resp.Status
	})
	return n
}

// start runs `lockstream subcommand` as one more process of the node.
func (n *deliveryNode) start(subcommand string) {
	n.t.Helper()
	n.procs[subcommand] = n.h.start(subcommand, subcommand)
}

// call makes one API request and fails the test unless the answer has wantStatus.
func (n *deliveryNode) call(method, path, token string, body any, wantStatus int) map[string]any {
	n.t.Helper()
	var payload io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			n.t.Fatal(err)
		}
		payload = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, n.api+path, payload)
	if err != nil {
		n.t.Fatal(err)
	}
	if n.onCall != nil {
		n.onCall(method, req.URL.String(), token)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		n.t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	if resp.StatusCode != wantStatus {
		n.t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, wantStatus, raw)
	}
	out := map[string]any{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			n.t.Fatalf("%s %s: answer is not a JSON object: %v: %s", method, path, err, raw)
		}
	}
	return out
}

// watcher creates a client with the webhook URL, links it to a new sensor per
// name, and returns the client's id and secret.
func (n *deliveryNode) watcher(name, webhookURL string, sensors ...string) (id, secret string) {
	n.t.Helper()
	c := n.call("POST", "/v1/clients", deliveryAdminToken, map[string]any{"name": name, "webhook_url": webhookURL}, http.StatusCreated)
	id, secret = c["id"].(string), c["secret"].(string)
	for _, s := range sensors {
		n.call("POST", "/v1/sensors", deliveryAdminToken, map[string]any{"id": s, "address": "1 " + s + " Street"}, http.StatusCreated)
		n.call("PUT", "/v1/clients/"+id+"/sensors/"+s, deliveryAdminToken, nil, http.StatusNoContent)
	}
	return id, secret
}

// flip posts a reading of the sensor: its first one is a state change.
func (n *deliveryNode) flip(sensor string, data int) {
	n.t.Helper()
	n.call("POST", "/v1/readings", deliveryIngestToken, map[string]any{"sensor_id": sensor, "data": data}, http.StatusAccepted)
}

// webhookDeliveries returns the client's webhook deliveries, any state.
func (n *deliveryNode) webhookDeliveries(clientID string) []map[string]any {
	n.t.Helper()
	page := n.call("GET", "/v1/clients/"+clientID+"/deliveries?limit=100", deliveryAdminToken, nil, http.StatusOK)
	var out []map[string]any
	items, _ := page["items"].([]any)
	for _, it := range items {
		if d := it.(map[string]any); d["channel"] == "webhook" {
			out = append(out, d)
		}
	}
	return out
}

// waitDelivery waits until the client has exactly one webhook delivery and it is
// in state, then returns its detail (GET /v1/deliveries/{id}) once attemptLog
// attempts are recorded in it.
func (n *deliveryNode) waitDelivery(clientID, state string, attemptLog int) map[string]any {
	n.t.Helper()
	var id string
	n.h.waitFor(fmt.Sprintf("client %s's webhook delivery to be %s", clientID, state), func() (bool, string) {
		ds := n.webhookDeliveries(clientID)
		if len(ds) != 1 {
			return false, fmt.Sprintf("%d webhook deliveries", len(ds))
		}
		id, _ = ds[0]["id"].(string)
		return ds[0]["state"] == state, fmt.Sprintf("state %v after %v attempts", ds[0]["state"], ds[0]["attempts"])
	})
	var detail map[string]any
	// Attempts reach ClickHouse through a writer that flushes each second.
	n.h.waitFor(fmt.Sprintf("%d attempts in delivery %s's attempt_log", attemptLog, id), func() (bool, string) {
		detail = n.call("GET", "/v1/deliveries/"+id, deliveryAdminToken, nil, http.StatusOK)
		log, _ := detail["attempt_log"].([]any)
		return len(log) >= attemptLog, fmt.Sprintf("%d attempts logged", len(log))
	})
	return detail
}

// attemptLog returns the attempt_log of a delivery detail.
func attemptLog(t *testing.T, detail map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	items, _ := detail["attempt_log"].([]any)
	for _, it := range items {
		out = append(out, it.(map[string]any))
	}
	return out
}

// scriptedSink is a receiver that answers its requests with a script of HTTP
// statuses (the last one repeats), verifies every signature, counts requests by
// webhook-id, and, while held, keeps requests open until released.
type scriptedSink struct {
	server *httptest.Server

	mu       sync.Mutex
	secret   string
	statuses []int
	calls    int
	seen     map[string]int
	attempts map[string][]int // the body's attempt numbers, by webhook-id, as received
	bad      []string
	held     chan struct{} // closed when released; nil when not holding
	inFlight atomic.Int64
}

func newScriptedSink(t *testing.T, statuses ...int) *scriptedSink {
	s := &scriptedSink{statuses: statuses, seen: map[string]int{}, attempts: map[string][]int{}}
	s.server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	return s
}

// start serves on a fresh loopback port.
func (s *scriptedSink) start(t *testing.T) *scriptedSink {
	s.server.Start()
	t.Cleanup(s.server.Close)
	return s
}

// startOn serves on addr (a sink that comes back where it was).
func (s *scriptedSink) startOn(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	s.server.Listener = ln
	s.server.Start()
	t.Cleanup(s.server.Close)
}

func (s *scriptedSink) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	s.mu.Lock()
	s.seen[r.Header.Get(webhook.HeaderID)]++
	var payload struct {
		Attempt int `json:"attempt"`
	}
	if json.Unmarshal(body, &payload) == nil {
		s.attempts[r.Header.Get(webhook.HeaderID)] = append(s.attempts[r.Header.Get(webhook.HeaderID)], payload.Attempt)
	}
	status := s.statuses[min(s.calls, len(s.statuses)-1)]
	s.calls++
	if err == nil {
		err = webhook.Verify(s.secret, r.Header, body, 0)
	}
	if err != nil {
		s.bad = append(s.bad, err.Error())
	}
	held := s.held
	s.mu.Unlock()
	if held != nil {
		s.inFlight.Add(1)
		select {
		case <-held:
		case <-r.Context().Done(): // the sender died
		}
		s.inFlight.Add(-1)
	}
	w.WriteHeader(status)
}

func (s *scriptedSink) setSecret(secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secret = secret
}

// hold makes requests wait until release.
func (s *scriptedSink) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = make(chan struct{})
}

// release lets held requests, and every later one, be answered at once.
func (s *scriptedSink) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
}

func (s *scriptedSink) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// receivedAttempts returns the attempt numbers received per webhook-id.
func (s *scriptedSink) receivedAttempts() map[string][]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]int, len(s.attempts))
	for id, a := range s.attempts {
		out[id] = append([]int(nil), a...)
	}
	return out
}

// received returns the number of requests per webhook-id and the signature
// failures.
func (s *scriptedSink) received() (map[string]int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]int, len(s.seen))
	for id, n := range s.seen {
		seen[id] = n
	}
	return seen, append([]string(nil), s.bad...)
}

// TestDeliveryOutcomesThroughAll follows three receivers through `lockstream all`:
// one that fails three times before it accepts (SENT on the 4th attempt, all four
// in the attempt log), one that refuses (FAILED after one attempt), and one that
// is down (GIVEN_UP after LOCKSTREAM_RETRY_MAX_ATTEMPTS, then delivered by POST
// /v1/deliveries/{id}/retry once it is back).
func TestDeliveryOutcomesThroughAll(t *testing.T) {
	t.Parallel()
	const maxAttempts = 4
	n := startDeliveryNode(t, []string{"all"},
		"LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true",
		"LOCKSTREAM_RETRY_BACKOFF_BASE=50ms",
		"LOCKSTREAM_RETRY_MAX_ATTEMPTS="+strconv.Itoa(maxAttempts),
	)

	flaky := newScriptedSink(t, 500, 500, 500, 200).start(t)
	refusing := newScriptedSink(t, 400).start(t)
	downAddr := freeAddr(t) // nothing listens here until the sink comes back
	down := newScriptedSink(t, 204)

	flakyID, secret := n.watcher("flaky", flaky.server.URL+"/hook", "outFlaky")
	flaky.setSecret(secret)
	refusingID, secret := n.watcher("refusing", refusing.server.URL+"/hook", "outRefusing")
	refusing.setSecret(secret)
	downID, secret := n.watcher("down", "http://"+downAddr+"/hook", "outDown")
	down.setSecret(secret)
	for _, s := range []string{"outFlaky", "outRefusing", "outDown"} {
		n.flip(s, 1)
	}

	// 500, 500, 500, 200: SENT on the 4th attempt, every attempt logged in order.
	detail := n.waitDelivery(flakyID, "SENT", 4)
	log := attemptLog(t, detail)
	if len(log) != 4 || detail["attempts"] != float64(4) {
		t.Fatalf("flaky receiver: %v attempts, attempt_log %v; want 4", detail["attempts"], log)
	}
	for i, a := range log {
		wantStatus, wantHTTP := "RETRY", float64(500)
		if i == 3 {
			wantStatus, wantHTTP = "SENT", float64(200)
		}
		if a["attempt"] != float64(i+1) || a["status"] != wantStatus || a["http_status"] != wantHTTP {
			t.Errorf("flaky receiver: attempt %d is %v, want attempt %d %s with HTTP %v", i+1, a, i+1, wantStatus, wantHTTP)
		}
	}
	if got := flaky.requests(); got != 4 {
		t.Errorf("flaky receiver got %d requests, want 4", got)
	}

	// 400: FAILED after one attempt, not retried.
	detail = n.waitDelivery(refusingID, "FAILED", 1)
	log = attemptLog(t, detail)
	if detail["attempts"] != float64(1) || len(log) != 1 || log[0]["status"] != "FAILED" || log[0]["http_status"] != float64(400) {
		t.Fatalf("refusing receiver: %v attempts, attempt_log %v; want one FAILED attempt with HTTP 400", detail["attempts"], log)
	}

	// Down: GIVEN_UP after the max attempts, each a connection failure.
	detail = n.waitDelivery(downID, "GIVEN_UP", maxAttempts)
	log = attemptLog(t, detail)
	if detail["attempts"] != float64(maxAttempts) || len(log) != maxAttempts {
		t.Fatalf("receiver down: %v attempts, attempt_log %v; want %d", detail["attempts"], log, maxAttempts)
	}
	for i, a := range log {
		wantStatus := "RETRY"
		if i == maxAttempts-1 {
			wantStatus = "GIVEN_UP"
		}
		if a["status"] != wantStatus || a["error_type"] != webhook.ErrorTypeConnection {
			t.Errorf("receiver down: attempt %d is %v, want %s with error type %s", i+1, a, wantStatus, webhook.ErrorTypeConnection)
		}
	}
	// Back: a retry through the API delivers it.
	down.startOn(t, downAddr)
	id := detail["id"].(string)
	n.call("POST", "/v1/deliveries/"+id+"/retry", deliveryAdminToken, nil, http.StatusAccepted)
	detail = n.waitDelivery(downID, "SENT", maxAttempts+1)
	if detail["attempts"] != float64(1) {
		t.Errorf("retried delivery: %v attempts since the retry, want 1", detail["attempts"])
	}
	if got := down.requests(); got != 1 {
		t.Errorf("the receiver that came back got %d requests, want 1", got)
	}

	// The refused receiver heard nothing more, and every request was signed right.
	if got := refusing.requests(); got != 1 {
		t.Errorf("refusing receiver got %d requests, want 1", got)
	}
	for name, s := range map[string]*scriptedSink{"flaky": flaky, "refusing": refusing, "down": down} {
		if _, bad := s.received(); len(bad) > 0 {
			t.Errorf("%s receiver: bad signatures: %v", name, bad)
		}
	}
}

// TestDeliverySSRFRefused: with private addresses not allowed, a webhook URL whose
// host resolves to 127.0.0.1 is refused before any connection: FAILED after one
// attempt with error type SSRF, and the receiver never hears of it; so is the
// metadata address 169.254.169.254.
func TestDeliverySSRFRefused(t *testing.T) {
	t.Parallel()
	n := startDeliveryNode(t, []string{"all"}, "LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=false", "LOCKSTREAM_RETRY_BACKOFF_BASE=50ms")
	sink := newScriptedSink(t, 204).start(t)
	_, port, err := net.SplitHostPort(sink.server.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// localhost, a name: the guard must check what it resolves to, not the URL.
	if addrs, err := net.LookupHost("localhost"); err != nil || len(addrs) == 0 {
		t.Fatalf("localhost does not resolve here (%v, %v): the test needs it", addrs, err)
	}
	clientID, secret := n.watcher("ssrf", "http://localhost:"+port+"/hook", "ssrfDoor")
	sink.setSecret(secret)
	// The cloud metadata address, link-local: refused the same way.
	metadataID, _ := n.watcher("metadata", "http://169.254.169.254/latest/meta-data", "metadataDoor")
	n.flip("ssrfDoor", 1)
	n.flip("metadataDoor", 1)

	for _, c := range []string{clientID, metadataID} {
		detail := n.waitDelivery(c, "FAILED", 1)
		log := attemptLog(t, detail)
		if detail["attempts"] != float64(1) || len(log) != 1 || log[0]["status"] != "FAILED" || log[0]["error_type"] != webhook.ErrorTypeSSRF {
			t.Fatalf("SSRF to %v: %v attempts, attempt_log %v; want one FAILED attempt with error type SSRF",
				detail["target"], detail["attempts"], log)
		}
	}
	if got := sink.requests(); got != 0 {
		t.Fatalf("the loopback receiver got %d requests, want none", got)
	}
}

// TestDeliverySurvivesSIGKILL runs the pipeline as processes (api, consume,
// fanout, retrier), kills the retrier with SIGKILL while its receiver holds the
// webhooks open, starts a new retrier, and checks that every delivery is finally
// SENT once its lease ran out, each webhook-id received exactly twice: the
// attempt cut short by the crash and the one after the restart, with the same
// webhook-id. Then each delivery's attempt log matches what the receiver got
// (see checkAttemptLogMatches).
func TestDeliverySurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	deliverySurvivesSIGKILL(t, []string{"api", "consume", "fanout", "retrier"}, "retrier")
}

// TestDeliverySurvivesSIGKILLOfAll is TestDeliverySurvivesSIGKILL with the
// whole pipeline in one `lockstream all` process, killed and started again:
// there the fan-out hands its webhook deliveries to the retrier claimed
// already (fanout.Handoff), and they too come back when their lease runs out.
func TestDeliverySurvivesSIGKILLOfAll(t *testing.T) {
	t.Parallel()
	deliverySurvivesSIGKILL(t, []string{"all"}, "all")
}

// deliverySurvivesSIGKILL runs the node's subcommands, holds four webhooks
// open at the sink, kills the killed one with SIGKILL and starts it again, and
// checks every delivery is SENT, each webhook-id received twice, the attempt
// log matching what the sink got.
func deliverySurvivesSIGKILL(t *testing.T, subcommands []string, killed string) {
	// The lease outlasts the few moments between the sink seeing the requests and
	// the kill, and is short enough that the new retrier takes the deliveries over
	// within seconds.
	n := startDeliveryNode(t, subcommands,
		"LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true",
		"LOCKSTREAM_RETRY_BACKOFF_BASE=50ms",
		"LOCKSTREAM_RETRY_LEASE=10s",
	)
	sink := newScriptedSink(t, 204).start(t)
	sink.hold()
	t.Cleanup(sink.release) // before the server's Close, which waits for handlers

	// Four sensors, all held open at once: fewer than the requests the webhook
	// sender sends to one endpoint at once (webhook.DefaultPerEndpointConcurrency).
	sensors := make([]string, 4)
	for i := range sensors {
		sensors[i] = fmt.Sprintf("killDoor%d", i)
	}
	clientID, secret := n.watcher("killed", sink.server.URL+"/hook", sensors...)
	sink.setSecret(secret)
	for _, s := range sensors {
		n.flip(s, 1)
	}
	n.h.waitFor("every webhook to be held open by the sink", func() (bool, string) {
		got := sink.inFlight.Load()
		return got == int64(len(sensors)), fmt.Sprintf("%d of %d in flight", got, len(sensors))
	})
	ds := n.webhookDeliveries(clientID)
	if len(ds) != len(sensors) {
		t.Fatalf("%d webhook deliveries before the kill, want %d", len(ds), len(sensors))
	}
	for _, d := range ds {
		if d["state"] != "IN_FLIGHT" {
			t.Fatalf("delivery %v is %v while its request is held, want IN_FLIGHT", d["id"], d["state"])
		}
	}

	if killed == "all" {
		t.Logf("before the kill: %s", metricLine(t, n.api, "lockstream_deliveries_handed_over_total"))
	}
	n.procs[killed].kill()
	sink.release()
	n.start(killed)
	n.h.waitFor("the API to be ready again", func() (bool, string) {
		resp, err := http.Get(n.api + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, "readyz: " + resp.Status
	})

	n.h.waitFor("every delivery to be SENT by the new retrier", func() (bool, string) {
		ds := n.webhookDeliveries(clientID)
		sent := 0
		for _, d := range ds {
			if d["state"] == "SENT" {
				sent++
			}
		}
		return sent == len(sensors) && len(ds) == len(sensors), fmt.Sprintf("%d of %d SENT", sent, len(ds))
	})
	seen, bad := sink.received()
	if len(bad) > 0 {
		t.Fatalf("bad signatures: %v", bad)
	}
	if len(seen) != len(sensors) {
		t.Fatalf("the sink saw %d webhook-ids (%v), want %d", len(seen), seen, len(sensors))
	}
	redelivered := 0
	for id, times := range seen {
		if times > 2 {
			t.Errorf("webhook-id %s received %d times, want at most 2", id, times)
		}
		if times == 2 {
			redelivered++
		}
	}
	// Every request was cut short by the crash, so each delivery was made again.
	if redelivered != len(sensors) {
		t.Errorf("%d of %d webhooks were sent again after the restart, want all: %v", redelivered, len(sensors), seen)
	}
	n.checkAttemptLogMatches(clientID, sink)
}

// checkAttemptLogMatches checks that each of the client's webhook deliveries'
// attempt log (GET /v1/deliveries/{id}) matches the attempts the sink received
// for its webhook-id (the event id): every received attempt is logged, and
// every logged attempt was received once — but for an attempt logged at its
// lease's expiry (LEASE_EXPIRED: the retrier holding it was killed, so whether
// it reached the receiver is unknown), which was received at most once. The
// lease expiry sent it again under the same webhook-id, so the receiver can
// dedupe it.
func (n *deliveryNode) checkAttemptLogMatches(clientID string, sink *scriptedSink) {
	n.t.Helper()
	received := sink.receivedAttempts()
	expired := 0
	for _, d := range n.webhookDeliveries(clientID) {
		id, event := d["id"].(string), d["event_id"].(string)
		detail := n.call("GET", "/v1/deliveries/"+id, deliveryAdminToken, nil, http.StatusOK)
		got := map[int]int{}
		for _, a := range received[event] {
			got[a]++
		}
		for _, a := range attemptLog(n.t, detail) {
			num := int(a["attempt"].(float64))
			switch {
			case a["error_type"] == storage.ErrorTypeLeaseExpired:
				expired++
				if got[num] > 1 {
					n.t.Errorf("delivery %s: attempt %d (lease expired) was received %d times, want at most once", id, num, got[num])
				}
			case got[num] != 1:
				n.t.Errorf("delivery %s: logged attempt %d was received %d times, want once (received %v)",
					id, num, got[num], received[event])
			}
			delete(got, num)
		}
		if len(got) > 0 {
			n.t.Errorf("delivery %s: attempts %v were received but not logged (log %v)", id, got, detail["attempt_log"])
		}
	}
	n.t.Logf("attempt logs match what the receiver got; %d attempts logged at their lease's expiry", expired)
}

// metricLine returns the line of the named metric in the /metrics page served
// at api, or what went wrong reading it.
func metricLine(t *testing.T, api, name string) string {
	t.Helper()
	resp, err := http.Get(api + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	for line := range strings.Lines(string(raw)) {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimSpace(line)
		}
	}
	return name + " not served"
}
