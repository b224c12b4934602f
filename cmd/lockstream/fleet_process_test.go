package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/notifier/webhook"
)

// The fleet process tests run `lockstream all` as a process and check the
// fleet judgement (DESIGN.md "Fleet judgement") at its receivers: severity,
// open-too-long alerts and the per-client seq with its reconcile feed.

// fleetBody is what the tests read of a webhook body.
type fleetBody struct {
	ID       string   `json:"id"`
	Type     string   `json:"type"`
	Seq      int64    `json:"seq"`
	Severity string   `json:"severity"`
	Data     *int     `json:"data"`
	Site     string   `json:"site"`
	Sensors  []string `json:"sensors"`
	Sensor   struct {
		ID string `json:"id"`
	} `json:"sensor"`
	// LostSince and SilentSeconds: a connection_restored's outage.
	LostSince     *time.Time `json:"lost_since"`
	SilentSeconds int64      `json:"silent_seconds"`
}

// bodySink is a receiver that verifies signatures and records the bodies it
// accepted; while down it answers 503 and records only the webhook ids it
// refused.
type bodySink struct {
	server *httptest.Server

	mu       sync.Mutex
	secret   string
	down     bool
	accepted []fleetBody
	refused  map[string]bool
	bad      []string
}

func startBodySink(t *testing.T) *bodySink {
	t.Helper()
	s := &bodySink{refused: map[string]bool{}}
	s.server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.server.Close)
	return s
}

func (s *bodySink) serve(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		err = webhook.Verify(s.secret, r.Header, raw, 0)
	}
	var b fleetBody
	if err == nil {
		err = json.Unmarshal(raw, &b)
	}
	if err != nil {
		s.bad = append(s.bad, err.Error())
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if s.down {
		s.refused[b.ID] = true
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if !slices.ContainsFunc(s.accepted, func(a fleetBody) bool { return a.ID == b.ID }) {
		s.accepted = append(s.accepted, b)
	}
	w.WriteHeader(http.StatusOK)
}

func (s *bodySink) setSecret(secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secret = secret
}

func (s *bodySink) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// snapshot returns the bodies accepted, the ids refused and the bad requests.
func (s *bodySink) snapshot() ([]fleetBody, map[string]bool, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	refused := make(map[string]bool, len(s.refused))
	for id := range s.refused {
		refused[id] = true
	}
	return slices.Clone(s.accepted), refused, slices.Clone(s.bad)
}

// waitAccepted waits until the sink has accepted n bodies and returns them.
func (s *bodySink) waitAccepted(n *deliveryNode, want int) []fleetBody {
	n.t.Helper()
	var got []fleetBody
	n.h.waitFor(fmt.Sprintf("%d webhooks accepted", want), func() (bool, string) {
		var bad []string
		got, _, bad = s.snapshot()
		if len(bad) > 0 {
			n.t.Fatalf("bad webhooks: %v", bad)
		}
		return len(got) >= want, fmt.Sprintf("%d accepted: %+v", len(got), got)
	})
	return got
}

// TestProcessLostWhileUnlockedIsCritical: through `lockstream all`, a sensor
// lost while unlocked is critical and one lost while locked a warning; an
// unlock longer than open_alert_after is one critical sensor_open_too_long;
// every webhook carries severity and the client's seq, 1, 2, 3… with no gap.
func TestProcessLostWhileUnlockedIsCritical(t *testing.T) {
	t.Parallel()
	n := startDeliveryNode(t, []string{"all"},
		"LOCKSTREAM_HEARTBEAT_TIMEOUT=3s", "LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL=200ms",
		"LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true")
	sink := startBodySink(t)
	id, secret := n.watcher("owner", sink.server.URL, "door", "shut")
	sink.setSecret(secret)
	n.call("PATCH", "/v1/sensors/door", deliveryAdminToken, map[string]any{"open_alert_after": "1s"}, http.StatusOK)
	n.flip("door", 0)
	n.flip("shut", 1)

	got := sink.waitAccepted(n, 5)
	byKind := map[string]fleetBody{}
	var seqs []int64
	for _, b := range got {
		byKind[b.Type+"/"+b.Sensor.ID] = b
		seqs = append(seqs, b.Seq)
	}
	for kind, want := range map[string]string{
		"state_changed/door": "info", "state_changed/shut": "info",
		"sensor_open_too_long/door": "critical",
		"connection_lost/door":      "critical", "connection_lost/shut": "warning",
	} {
		b, ok := byKind[kind]
		if !ok || b.Severity != want {
			t.Errorf("%s: %+v (received %v), want severity %s", kind, b, ok, want)
		}
	}
	if lost := byKind["connection_lost/door"]; lost.Data == nil || *lost.Data != 0 {
		t.Errorf("door's loss carries data %v, want its last state 0", lost.Data)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	if fmt.Sprint(seqs) != "[1 2 3 4 5]" {
		t.Errorf("seqs received %v, want 1..5", seqs)
	}
	// Each opening is reported once: nothing more comes for door.
	feed := n.call("GET", "/v1/clients/"+id+"/events?after=0", deliveryAdminToken, nil, http.StatusOK)
	if items, _ := feed["items"].([]any); len(items) != 5 {
		t.Errorf("the client's feed lists %d events, want 5: %v", len(items), feed)
	}
}

// TestProcessReceiverPullsMissedEventsBySeq: through `lockstream all`, a
// receiver that was down while 20 events were sent to it pulls exactly those
// 20, in seq order after the last seq it had, from GET /v1/clients/{id}/events.
func TestProcessReceiverPullsMissedEventsBySeq(t *testing.T) {
	t.Parallel()
	const before, missed = 3, 20
	n := startDeliveryNode(t, []string{"all"}, "LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true")
	sink := startBodySink(t)
	var sensors []string
	for i := range before + missed {
		sensors = append(sensors, fmt.Sprintf("r%02d", i))
	}
	id, secret := n.watcher("receiver", sink.server.URL, sensors...)
	sink.setSecret(secret)
	for _, s := range sensors[:before] {
		n.flip(s, 1)
	}
	got := sink.waitAccepted(n, before)
	var last int64
	for _, b := range got {
		last = max(last, b.Seq)
	}
	if last != before {
		t.Fatalf("the receiver's last seq is %d after %d events: %+v", last, before, got)
	}

	sink.setDown(true)
	for _, s := range sensors[before:] {
		n.flip(s, 1)
	}
	var refused map[string]bool
	n.h.waitFor(fmt.Sprintf("%d webhooks refused", missed), func() (bool, string) {
		_, refused, _ = sink.snapshot()
		return len(refused) == missed, fmt.Sprintf("%d refused", len(refused))
	})

	// Pull from the last seq it has, a page of 7 at a time. The feed also holds
	// the operational notice of the failing streak (endpoint_failing, after
	// LOCKSTREAM_ENDPOINT_FAILING_AFTER consecutive failures), written with
	// the attempts' outcomes: pull until it is there too.
	var pulled, events []fleetBody
	notices := 0
	n.h.waitFor(fmt.Sprintf("the feed to hold the %d missed events and one endpoint_failing", missed), func() (bool, string) {
		pulled = n.pullFeed(id, last, 7)
		events, notices = events[:0], 0
		for _, b := range pulled {
			if b.Type == "endpoint_failing" {
				notices++
				continue
			}
			events = append(events, b)
		}
		return len(events) >= missed && notices >= 1, fmt.Sprintf("%d events and %d notices", len(events), notices)
	})
	if len(events) != missed || notices != 1 {
		t.Fatalf("pulled %d events and %d endpoint_failing notices, want the %d missed and one: %+v", len(events), notices, missed, pulled)
	}
	for i, b := range pulled {
		if b.Seq != last+int64(i)+1 {
			t.Errorf("pulled item %d has seq %d, want %d", i, b.Seq, last+int64(i)+1)
		}
	}
	for _, b := range events {
		if !refused[b.ID] || b.Type != "state_changed" || b.Severity != "info" {
			t.Errorf("pulled %+v: not one of the refused webhooks", b)
		}
	}
}

// pullFeed reads the client's feed after seq, limit items a page, to its end.
func (n *deliveryNode) pullFeed(clientID string, after int64, limit int) []fleetBody {
	var pulled []fleetBody
	for {
		page := n.call("GET", fmt.Sprintf("/v1/clients/%s/events?after=%d&limit=%d", clientID, after, limit), deliveryAdminToken, nil, http.StatusOK)
		raw, err := json.Marshal(page["items"])
		if err != nil {
			n.t.Fatal(err)
		}
		var items []fleetBody
		if err := json.Unmarshal(raw, &items); err != nil {
			n.t.Fatal(err)
		}
		pulled = append(pulled, items...)
		next, ok := page["next_after"].(float64)
		if !ok {
			return pulled
		}
		after = int64(next)
	}
}

// keepReporting posts a reading of sensor (data 1) every interval until the
// test ends, so that it stays online.
func (n *deliveryNode) keepReporting(sensor string, interval time.Duration) {
	keepReporting(n.t, n.api+"/v1/readings", deliveryIngestToken, sensor, 1, interval)
}

// countTypes counts the distinct events received by type.
func countTypes(bodies []fleetBody) map[string]int {
	n := map[string]int{}
	for _, b := range bodies {
		n[b.Type]++
	}
	return n
}

// TestProcessSiteOutageOnceUnderTwoHeartbeats: through `lockstream all` and a
// second `lockstream heartbeat`, a site of four with three falling silent gives
// exactly one site_outage webhook listing them and no connection_lost webhook
// (their losses stay in history); one heartbeat process is SIGKILLed; when two
// of the three are back, exactly one site_restored follows.
func TestProcessSiteOutageOnceUnderTwoHeartbeats(t *testing.T) {
	t.Parallel()
	// A timeout long enough that the sensors are registered and report
	// before any of them is lost from its registration.
	n := startDeliveryNode(t, []string{"all"},
		"LOCKSTREAM_HEARTBEAT_TIMEOUT=6s", "LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL=200ms",
		"LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true")
	second := n.h.start("heartbeat", "heartbeat")
	sink := startBodySink(t)
	sensors := []string{"hq1", "hq2", "hq3", "hq4"}
	c := n.call("POST", "/v1/clients", deliveryAdminToken, map[string]any{"name": "site owner", "webhook_url": sink.server.URL}, http.StatusCreated)
	sink.setSecret(c["secret"].(string))
	for _, s := range sensors {
		n.call("POST", "/v1/sensors", deliveryAdminToken, map[string]any{"id": s, "address": "HQ " + s, "site": "hq"}, http.StatusCreated)
		n.call("PUT", "/v1/clients/"+c["id"].(string)+"/sensors/"+s, deliveryAdminToken, nil, http.StatusNoContent)
	}
	// One request for all four: sent one by one on a loaded machine, the first
	// could fall silent seconds before the others and be lost on its own.
	n.flipAll(sensors, 1)
	n.keepReporting("hq4", 300*time.Millisecond)

	var got []fleetBody
	n.h.waitFor("one site_outage webhook", func() (bool, string) {
		got, _, _ = sink.snapshot()
		return countTypes(got)["site_outage"] >= 1, fmt.Sprintf("received %v", countTypes(got))
	})
	second.kill()
	for _, b := range got {
		if b.Type == "site_outage" && (b.Site != "hq" || fmt.Sprint(b.Sensors) != "[hq1 hq2 hq3]" || b.Severity != "warning") {
			t.Errorf("site_outage = %+v, want hq's listing hq1 hq2 hq3", b)
		}
	}
	// History keeps every per-sensor loss.
	n.h.waitFor("hq1's loss in history", func() (bool, string) {
		page := n.call("GET", "/v1/sensors/hq1/events", deliveryAdminToken, nil, http.StatusOK)
		raw, _ := json.Marshal(page["items"])
		return strings.Contains(string(raw), "connection_lost"), string(raw)
	})

	n.flip("hq1", 1)
	n.flip("hq2", 1)
	// Back for good: silent again, they would be lost again before the counts.
	n.keepReporting("hq1", 300*time.Millisecond)
	n.keepReporting("hq2", 300*time.Millisecond)
	n.h.waitFor("one site_restored webhook", func() (bool, string) {
		got, _, _ = sink.snapshot()
		return countTypes(got)["site_restored"] >= 1, fmt.Sprintf("received %v", countTypes(got))
	})
	// Both restores of the back sensors arrive too; by then every event before
	// them has been fanned out.
	n.h.waitFor("hq1's and hq2's restores", func() (bool, string) {
		got, _, _ = sink.snapshot()
		return countTypes(got)["connection_restored"] >= 2, fmt.Sprintf("received %v", countTypes(got))
	})
	counts := countTypes(got)
	if counts["site_outage"] != 1 || counts["site_restored"] != 1 || counts["connection_lost"] != 0 {
		t.Fatalf("received %v, want one site_outage, one site_restored and no connection_lost: %+v", counts, got)
	}
}

// TestProcessMaintenanceSuppressesLossAndEndsWithOneSummary: through
// `lockstream all`, a sensor that falls silent inside its maintenance window
// gets no connection_lost webhook; the window's end brings one
// maintenance_ended listing it. A sensor outside any window is lost as usual.
func TestProcessMaintenanceSuppressesLossAndEndsWithOneSummary(t *testing.T) {
	t.Parallel()
	n := startDeliveryNode(t, []string{"all"},
		"LOCKSTREAM_HEARTBEAT_TIMEOUT=3s", "LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL=200ms",
		"LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true")
	sink := startBodySink(t)
	_, secret := n.watcher("maintainer", sink.server.URL, "mx", "ctl")
	sink.setSecret(secret)
	// The window is long enough for any machine to see mx fall silent in it;
	// once its loss is in the history, the window is moved to end soon. A
	// window ending a fixed time after the flip failed when a loaded machine
	// took longer than that to notice the loss.
	now := time.Now().UTC()
	from := now.Add(-time.Minute).Format(time.RFC3339)
	n.call("PUT", "/v1/sensors/mx/maintenance", deliveryAdminToken, map[string]any{
		"from": from, "to": now.Add(10 * time.Minute).Format(time.RFC3339)}, http.StatusOK)
	n.flip("mx", 1)
	n.flip("ctl", 1)
	n.h.waitFor("mx's loss in history, inside its window", func() (bool, string) {
		page := n.call("GET", "/v1/sensors/mx/events", deliveryAdminToken, nil, http.StatusOK)
		raw, _ := json.Marshal(page["items"])
		return strings.Contains(string(raw), "connection_lost"), string(raw)
	})
	n.call("PUT", "/v1/sensors/mx/maintenance", deliveryAdminToken, map[string]any{
		"from": from, "to": time.Now().UTC().Add(3 * time.Second).Format(time.RFC3339)}, http.StatusOK)

	var got []fleetBody
	n.h.waitFor("the maintenance_ended webhook and ctl's loss", func() (bool, string) {
		got, _, _ = sink.snapshot()
		c := countTypes(got)
		return c["maintenance_ended"] >= 1 && c["connection_lost"] >= 1, fmt.Sprintf("received %v", c)
	})
	for _, b := range got {
		switch {
		case b.Type == "connection_lost" && b.Sensor.ID != "ctl":
			t.Errorf("a loss inside the maintenance window was delivered: %+v", b)
		case b.Type == "maintenance_ended" && (b.Sensor.ID != "mx" || fmt.Sprint(b.Sensors) != "[mx]" || b.Severity != "info"):
			t.Errorf("maintenance_ended = %+v, want mx's listing mx", b)
		}
	}
	if c := countTypes(got); c["maintenance_ended"] != 1 || c["connection_lost"] != 1 {
		t.Errorf("received %v, want one maintenance_ended and ctl's loss only", c)
	}
}

// TestProcessFlappingSensorHeldThenStable: through `lockstream all`, a sensor
// flipping 10 times within seconds gives one sensor_unstable, no webhook for
// its changes after the 6th, and, once quiet for the flap window, one
// sensor_stable with its last state; ClickHouse holds all 10 changes.
func TestProcessFlappingSensorHeldThenStable(t *testing.T) {
	t.Parallel()
	n := startDeliveryNode(t, []string{"all"},
		"LOCKSTREAM_FLAP_WINDOW=3s", "LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL=200ms",
		"LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true")
	sink := startBodySink(t)
	_, secret := n.watcher("flapper", sink.server.URL, "fx")
	sink.setSecret(secret)
	for i := range 10 {
		n.flip("fx", (i+1)%2) // 1, 0, 1, … ending with 0
	}
	var got []fleetBody
	n.h.waitFor("one sensor_stable webhook", func() (bool, string) {
		got, _, _ = sink.snapshot()
		return countTypes(got)["sensor_stable"] >= 1, fmt.Sprintf("received %v", countTypes(got))
	})
	c := countTypes(got)
	if c["sensor_unstable"] != 1 || c["sensor_stable"] != 1 || c["state_changed"] > 6 {
		t.Errorf("received %v, want one sensor_unstable, one sensor_stable and at most the first 6 changes", c)
	}
	for _, b := range got {
		if b.Type == "sensor_stable" && (b.Data == nil || *b.Data != 0 || b.Sensor.ID != "fx") {
			t.Errorf("sensor_stable = %+v, want fx's last state 0", b)
		}
	}
	n.h.waitFor("all 10 changes in ClickHouse", func() (bool, string) {
		page := n.call("GET", "/v1/sensors/fx/events?limit=100", deliveryAdminToken, nil, http.StatusOK)
		items, _ := page["items"].([]any)
		changes := 0
		for _, it := range items {
			if it.(map[string]any)["type"] == "state_changed" {
				changes++
			}
		}
		return changes == 10, fmt.Sprintf("%d changes in history", changes)
	})
}
