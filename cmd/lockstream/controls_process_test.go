package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/notifier/webhook"
)

// The delivery controls' process tests (issue 17) run `lockstream all` (and a
// second retrier) against real stores and a recording sink: subscriptions by
// event type, a rate limit shared by two retriers, the auto-disable of a dead
// endpoint with its owner's email and its enabling, and the recovery of given-up
// deliveries.

// received is one webhook as the recording sink got it.
type received struct {
	at   time.Time // when the sink's handler began
	id   string    // webhook-id
	body webhook.Body
}

// recordingSink answers every webhook with its status (200 unless set),
// verifies its signature and keeps it with its receive time.
type recordingSink struct {
	server *httptest.Server

	mu     sync.Mutex
	secret string
	status int
	got    []received
	bad    []string
}

func newRecordingSink(t *testing.T, addr string) *recordingSink {
	t.Helper()
	s := &recordingSink{status: http.StatusOK}
	s.server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listening on %s: %v", addr, err)
		}
		s.server.Listener = ln
	}
	s.server.Start()
	t.Cleanup(s.server.Close)
	return s
}

func (s *recordingSink) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	raw, err := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		err = webhook.Verify(s.secret, r.Header, raw, 0)
	}
	var b webhook.Body
	if err == nil {
		err = json.Unmarshal(raw, &b)
	}
	if err != nil {
		s.bad = append(s.bad, err.Error())
	}
	s.got = append(s.got, received{at: at, id: r.Header.Get(webhook.HeaderID), body: b})
	w.WriteHeader(s.status)
}

func (s *recordingSink) set(secret string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secret, s.status = secret, status
}

// requests returns every webhook received so far, in arrival order.
func (s *recordingSink) requests() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func (s *recordingSink) badSignatures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bad)
}

// distinct counts the webhook-ids received.
func distinct(rs []received) int {
	ids := map[string]bool{}
	for _, r := range rs {
		ids[r.id] = true
	}
	return len(ids)
}

// sensors registers n sensors named prefix0… and links them to the client.
func (n *deliveryNode) sensors(clientID, prefix string, count int) []string {
	n.t.Helper()
	ids := make([]string, count)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", prefix, i)
		n.call("POST", "/v1/sensors", deliveryAdminToken, map[string]any{"id": ids[i], "address": ids[i] + " Street"}, http.StatusCreated)
		n.call("PUT", "/v1/clients/"+clientID+"/sensors/"+ids[i], deliveryAdminToken, nil, http.StatusNoContent)
	}
	return ids
}

// flipAll posts one reading per sensor in one request.
func (n *deliveryNode) flipAll(sensors []string, data int) {
	n.t.Helper()
	readings := make([]map[string]any, len(sensors))
	for i, s := range sensors {
		readings[i] = map[string]any{"sensor_id": s, "data": data}
	}
	n.call("POST", "/v1/readings", deliveryIngestToken, readings, http.StatusAccepted)
}

// webhookStates counts the client's webhook deliveries by state.
func (n *deliveryNode) webhookStates(clientID string) map[string]int {
	n.t.Helper()
	states := map[string]int{}
	for _, d := range n.webhookDeliveries(clientID) {
		states[d["state"].(string)]++
	}
	return states
}

// TestSubscriptionFilterThroughAll: a client subscribed to connection_lost only
// gets the loss of its sensor and no state_changed webhook, while a client of
// every type linked to the same sensor gets both.
func TestSubscriptionFilterThroughAll(t *testing.T) {
	t.Parallel()
	n := startDeliveryNode(t, []string{"all"}, "LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true",
		"LOCKSTREAM_HEARTBEAT_TIMEOUT=2s", "LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL=200ms")
	lossSink, allSink := newRecordingSink(t, ""), newRecordingSink(t, "")
	c := n.call("POST", "/v1/clients", deliveryAdminToken, map[string]any{"name": "losses", "webhook_url": lossSink.server.URL,
		"event_types": []string{"connection_lost"}}, http.StatusCreated)
	lossID := c["id"].(string)
	lossSink.set(c["secret"].(string), http.StatusOK)
	if types, _ := c["event_types"].([]any); len(types) != 1 || types[0] != "connection_lost" {
		t.Fatalf("created client's event_types: %v", c["event_types"])
	}
	allID, secret := n.watcher("everything", allSink.server.URL, "subDoor")
	allSink.set(secret, http.StatusOK)
	n.call("PUT", "/v1/clients/"+lossID+"/sensors/subDoor", deliveryAdminToken, nil, http.StatusNoContent)
	// A bad subscription is refused, naming the field.
	n.call("PATCH", "/v1/clients/"+lossID, deliveryAdminToken, map[string]any{"event_types": []string{"door_opened"}},
		http.StatusUnprocessableEntity)

	n.flip("subDoor", 1) // a state change now, a loss 2 s later
	n.h.waitFor("the loss at the loss-only client", func() (bool, string) {
		rs := lossSink.requests()
		return len(rs) > 0, fmt.Sprintf("%d webhooks", len(rs))
	})
	n.h.waitFor("the state change and the loss at the client of every type", func() (bool, string) {
		rs := allSink.requests()
		return len(rs) >= 2, fmt.Sprintf("%d webhooks", len(rs))
	})
	for _, r := range lossSink.requests() {
		if r.body.Type != "connection_lost" {
			t.Errorf("the loss-only client got a %s webhook", r.body.Type)
		}
	}
	var types []string
	for _, r := range allSink.requests() {
		types = append(types, string(r.body.Type))
	}
	if len(types) != 2 || types[0] != "state_changed" || types[1] != "connection_lost" {
		t.Errorf("the client of every type got %v, want state_changed then connection_lost", types)
	}
	// Its outbox holds the loss alone, on every channel.
	for _, d := range n.webhookDeliveries(lossID) {
		if d["event_type"] != "connection_lost" {
			t.Errorf("loss-only client has a %v delivery", d["event_type"])
		}
	}
	if len(n.webhookDeliveries(allID)) != 2 {
		t.Errorf("client of every type: %d webhook deliveries, want 2", len(n.webhookDeliveries(allID)))
	}
	if bad := append(lossSink.badSignatures(), allSink.badSignatures()...); len(bad) > 0 {
		t.Errorf("bad signatures: %v", bad)
	}
}

// TestRateLimitAcrossTwoRetriers: an endpoint limited to 5 a second gets 100
// deliveries from two retrier processes (all's and a second one) at most 5 in
// any 1 s window of the sink's receive times, each once. The limiter spaces
// starts 1.2 s / 5 apart on Redis' clock, so this holds while the time from a
// start to the sink's handler varies by less than 200 ms. Each process has 4
// workers, so it claims at most 4 at a time: with 256 the first to wake
// could claim all 100, and since a retrier claims again when the limiter's
// wait for what it held ends, the other might never deliver one. For the
// same reason all's fan-out does not wait for its own sender's places
// (LOCKSTREAM_FANOUT_HANDOFF_WAIT=0, as with any retrier beside all): with
// the wait, a burst goes to all's sender alone.
func TestRateLimitAcrossTwoRetriers(t *testing.T) {
	t.Parallel()
	n := startDeliveryNode(t, []string{"all"}, "LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true",
		"LOCKSTREAM_RETRY_BACKOFF_BASE=50ms", "LOCKSTREAM_RETRY_WORKERS=4", "LOCKSTREAM_FANOUT_HANDOFF_WAIT=0")
	// The second retrier logs each attempt (debug), to show both delivered.
	second := n.h.start("retrier", "retrier", "--log-level", "debug")
	sink := newRecordingSink(t, "")
	c := n.call("POST", "/v1/clients", deliveryAdminToken, map[string]any{"name": "paced", "webhook_url": sink.server.URL,
		"rate_limit": 5}, http.StatusCreated)
	id := c["id"].(string)
	sink.set(c["secret"].(string), http.StatusOK)
	if c["rate_limit"] != float64(5) {
		t.Fatalf("created client's rate_limit: %v", c["rate_limit"])
	}
	const deliveries = 100
	n.flipAll(n.sensors(id, "paced", deliveries), 1)
	n.h.waitFor(fmt.Sprintf("%d webhooks at the sink", deliveries), func() (bool, string) {
		rs := sink.requests()
		return distinct(rs) >= deliveries, fmt.Sprintf("%d webhooks", distinct(rs))
	})
	rs := sink.requests()
	if len(rs) != deliveries || distinct(rs) != deliveries {
		t.Errorf("%d requests for %d webhook-ids, want each of %d once", len(rs), distinct(rs), deliveries)
	}
	// Any 6 consecutive arrivals span at least a second; and per calendar second
	// of the sink's clock at most 5.
	perSecond := map[int64]int{}
	minSpan := time.Hour // the shortest time 6 consecutive arrivals took
	for i, r := range rs {
		perSecond[r.at.Unix()]++
		if i >= 5 {
			minSpan = min(minSpan, r.at.Sub(rs[i-5].at))
		}
		if i >= 5 && r.at.Sub(rs[i-5].at) < time.Second {
			t.Errorf("6 webhooks within %v: arrivals %d to %d", r.at.Sub(rs[i-5].at), i-5, i)
		}
	}
	for sec, count := range perSecond {
		if count > 5 {
			t.Errorf("%d webhooks in the second %s", count, time.Unix(sec, 0).UTC().Format(time.TimeOnly))
		}
	}
	t.Logf("%d webhooks in %v (%.2f/s); 6 consecutive arrivals took %v at the least", len(rs),
		rs[len(rs)-1].at.Sub(rs[0].at), float64(len(rs)-1)/rs[len(rs)-1].at.Sub(rs[0].at).Seconds(), minSpan)
	// Both retriers delivered: the second one some (its SENT attempts), not all.
	var bySecond int
	n.h.waitFor("the second retrier's attempts in its log", func() (bool, string) {
		bySecond = 0
		for line := range strings.SplitSeq(second.out.String(), "\n") {
			if strings.Contains(line, `msg="delivery attempt"`) && strings.Contains(line, "status=SENT") {
				bySecond++
			}
		}
		return bySecond > 0, "none logged"
	})
	if bySecond >= deliveries {
		t.Errorf("the second retrier sent %d: all's sent none", bySecond)
	}
	t.Logf("the second retrier process sent %d of them", bySecond)
}

// TestAutoDisableThroughAll: an endpoint that fails every attempt for the
// (shortened) disable window is disabled; its owner gets one email; its
// deliveries, and those of later events, are kept PAUSED and not attempted;
// enabling it delivers them all, each sensor's in order.
func TestAutoDisableThroughAll(t *testing.T) {
	t.Parallel()
	mail := newMailSink(t)
	n := startDeliveryNode(t, []string{"all"}, "LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true",
		"LOCKSTREAM_RETRY_BACKOFF_BASE=100ms", "LOCKSTREAM_RETRY_MAX_ATTEMPTS=1000",
		"LOCKSTREAM_ENDPOINT_DISABLE_AFTER=2s", "LOCKSTREAM_ENDPOINT_DISABLE_MIN_FAILURES=3",
		"LOCKSTREAM_ENDPOINT_FAILING_AFTER=2", "LOCKSTREAM_SMTP_URL=smtp://"+mail.addr)
	sink := newRecordingSink(t, "")
	// The client's address gets its email notifications (another channel, not
	// paused) and the notice.
	c := n.call("POST", "/v1/clients", deliveryAdminToken, map[string]any{"name": "dead", "webhook_url": sink.server.URL,
		"email": "owner@example.com"}, http.StatusCreated)
	id := c["id"].(string)
	sink.set(c["secret"].(string), http.StatusServiceUnavailable)
	doors := n.sensors(id, "deadDoor", 2)
	n.flipAll(doors, 1)

	n.h.waitFor("the endpoint to be disabled", func() (bool, string) {
		e := n.call("GET", "/v1/clients/"+id+"/endpoint", deliveryAdminToken, nil, http.StatusOK)
		return e["state"] == "disabled", fmt.Sprintf("endpoint %v after %v failures", e["state"], e["failures"])
	})
	// A delivery still in flight when the endpoint was disabled fails, and is
	// SUPERSEDED rather than paused if a newer state already waits behind it
	// (the outbox's rule): wait for the first two to be PAUSED before flipping again.
	n.h.waitFor("the first webhook deliveries to be PAUSED", func() (bool, string) {
		states := n.webhookStates(id)
		return states["PAUSED"] == 2 && len(states) == 1, fmt.Sprintf("%v", states)
	})
	n.flipAll(doors, 0) // kept too, behind the first ones
	n.flipAll(doors[:1], 1)
	n.h.waitFor("every webhook delivery to be PAUSED", func() (bool, string) {
		states := n.webhookStates(id)
		return states["PAUSED"] == 5 && len(states) == 1, fmt.Sprintf("%v", states)
	})
	attempted := len(sink.requests())
	notices := 0
	for notices == 0 {
		msg := mail.next(t)
		if !isNotice(msg) {
			continue // an email notification
		}
		notices++
		if !strings.Contains(msg, "owner@example.com") || !strings.Contains(msg, "/v1/clients/"+id+"/endpoint/enable") {
			t.Errorf("the notice is not to the owner or does not say how to enable:\n%s", msg)
		}
	}
	// One endpoint_failing (2 failures) and one endpoint_disabled (at least 3
	// failures, for 2 s): the streak is told failing before it can be disabled.
	e := n.call("GET", "/v1/clients/"+id+"/endpoint", deliveryAdminToken, nil, http.StatusOK)
	byType := map[any]int{}
	events, _ := e["events"].([]any)
	for _, ev := range events {
		byType[ev.(map[string]any)["type"]]++
	}
	if byType["endpoint_disabled"] != 1 || byType["endpoint_failing"] != 1 || len(events) != 2 {
		t.Errorf("endpoint events %v, want one endpoint_failing and one endpoint_disabled", e["events"])
	}

	// Back up and enabled: the 5 kept deliveries go out, each sensor's in event
	// order, and nothing was attempted while disabled.
	sink.set(c["secret"].(string), http.StatusOK)
	enabled := n.call("POST", "/v1/clients/"+id+"/endpoint/enable", deliveryAdminToken, nil, http.StatusOK)
	if enabled["resumed"] != float64(5) {
		t.Errorf("enable resumed %v deliveries, want 5", enabled["resumed"])
	}
	n.h.waitFor("the kept deliveries to be SENT", func() (bool, string) {
		states := n.webhookStates(id)
		return states["SENT"] == 5, fmt.Sprintf("%v", states)
	})
	rs := sink.requests()
	if got := len(rs) - attempted; got != 5 {
		t.Errorf("%d requests after enabling, want the 5 kept (the endpoint was attempted while disabled?)", got)
	}
	want := map[string][]int{doors[0]: {1, 0, 1}, doors[1]: {1, 0}}
	got := map[string][]int{}
	for _, r := range rs[attempted:] {
		got[r.body.Sensor.ID] = append(got[r.body.Sensor.ID], *r.body.Data)
	}
	for door, seq := range want {
		if !slices.Equal(got[door], seq) {
			t.Errorf("%s's states after enabling: %v, want %v", door, got[door], seq)
		}
	}
	// The client's feed tells the endpoint's story once each, in order:
	// failing (at the 2nd failure, before the 3 that disable it), disabled,
	// recovered (after enable and a success); the webhook carried none of it.
	n.h.waitFor("endpoint_recovered on the client's feed", func() (bool, string) {
		notices := feedNotices(n, id)
		return slices.Contains(notices, "endpoint_recovered"), fmt.Sprintf("%v", notices)
	})
	if notices := feedNotices(n, id); !slices.Equal(notices, []string{"endpoint_failing", "endpoint_disabled", "endpoint_recovered"}) {
		t.Errorf("the feed's notices: %v, want endpoint_failing, endpoint_disabled, endpoint_recovered", notices)
	}
	for _, r := range sink.requests() {
		if strings.HasPrefix(string(r.body.Type), "endpoint_") {
			t.Errorf("the webhook carried a %s", r.body.Type)
		}
	}
	for len(mail.got) > 0 {
		if msg := <-mail.got; isNotice(msg) {
			t.Errorf("a second notice:\n%s", msg)
		}
	}
}

// isNotice reports whether an email is an endpoint notice.
func isNotice(msg string) bool {
	return strings.Contains(msg, "webhook endpoint of dead was disabled")
}

// TestRecoverThroughAll: 30 deliveries GIVEN_UP while the sink was down are all
// delivered after one recover call, once the sink is up.
func TestRecoverThroughAll(t *testing.T) {
	t.Parallel()
	n := startDeliveryNode(t, []string{"all"}, "LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true",
		"LOCKSTREAM_RETRY_BACKOFF_BASE=50ms", "LOCKSTREAM_RETRY_MAX_ATTEMPTS=2")
	addr := freeAddr(t) // nothing listens until the sink comes up
	c := n.call("POST", "/v1/clients", deliveryAdminToken, map[string]any{"name": "down", "webhook_url": "http://" + addr + "/hook"},
		http.StatusCreated)
	id := c["id"].(string)
	const count = 30
	since := time.Now().Add(-time.Minute)
	n.flipAll(n.sensors(id, "recDoor", count), 1)
	n.h.waitFor(fmt.Sprintf("%d GIVEN_UP deliveries", count), func() (bool, string) {
		states := n.webhookStates(id)
		return states["GIVEN_UP"] == count, fmt.Sprintf("%v", states)
	})

	sink := newRecordingSink(t, addr)
	sink.set(c["secret"].(string), http.StatusOK)
	res := n.call("POST", "/v1/clients/"+id+"/deliveries/recover", deliveryAdminToken,
		map[string]any{"since": since.Format(time.RFC3339), "states": []string{"FAILED", "GIVEN_UP"}}, http.StatusAccepted)
	if res["recovered"] != float64(count) || res["superseded"] != float64(0) {
		t.Fatalf("recover answered %v, want %d recovered", res, count)
	}
	n.h.waitFor(fmt.Sprintf("%d webhooks at the sink", count), func() (bool, string) {
		return distinct(sink.requests()) >= count, fmt.Sprintf("%d webhooks", distinct(sink.requests()))
	})
	n.h.waitFor("every delivery SENT", func() (bool, string) {
		states := n.webhookStates(id)
		return states["SENT"] == count, fmt.Sprintf("%v", states)
	})
	if rs := sink.requests(); len(rs) != count {
		t.Errorf("%d requests for %d deliveries", len(rs), count)
	}
	if bad := sink.badSignatures(); len(bad) > 0 {
		t.Errorf("bad signatures: %v", bad)
	}
}

// feedNotices lists the operational notices on the client's feed, in seq order.
func feedNotices(n *deliveryNode, clientID string) []string {
	feed := n.call("GET", "/v1/clients/"+clientID+"/events?after=0&limit=1000", deliveryAdminToken, nil, http.StatusOK)
	var notices []string
	items, _ := feed["items"].([]any)
	for _, it := range items {
		if typ, _ := it.(map[string]any)["type"].(string); strings.HasPrefix(typ, "endpoint_") {
			notices = append(notices, typ)
		}
	}
	return notices
}
