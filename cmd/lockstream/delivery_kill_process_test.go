package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"
)

// burstSensors × burstWaves changes make a burst: every wave flips every sensor.
const (
	burstSensors = 20
	burstWaves   = 30
)

// burstSettings make the kills' cost short: a delivery held by a killed
// retrier is taken over once its lease ran out.
var burstSettings = []string{
	"LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true",
	"LOCKSTREAM_RETRY_BACKOFF_BASE=50ms",
	"LOCKSTREAM_RETRY_LEASE=5s",
	// Every wave flips every sensor: no burst may count as flapping.
	"LOCKSTREAM_FLAP_CHANGES=100000",
}

// TestFanoutAndRetrierKilledMidBurst SIGKILLs the fan-out and then the
// retrier, each its own process, while a burst of changes is posted, and
// restarts each at once. Every change reaches the client at least once, each
// sensor's in the order they happened, and every attempt the receiver got is
// in the attempt log.
func TestFanoutAndRetrierKilledMidBurst(t *testing.T) {
	t.Parallel()
	n := startDeliveryNode(t, []string{"api", "consume", "fanout", "retrier"}, burstSettings...)
	runKilledMidBurst(t, n, map[int][]string{burstWaves / 3: {"fanout"}, 2 * burstWaves / 3: {"retrier"}})
}

// TestAllKilledMidBurst is the same with the fan-out and the retrier in one
// process (`lockstream all`, which also serves the API), SIGKILLed in the
// middle: what the fan-out hands to the sender in memory is lost with the
// process, and must be delivered all the same. Once: the process's consumer
// groups wait out the killed members' session (up to a minute) before the new
// process consumes again.
func TestAllKilledMidBurst(t *testing.T) {
	t.Parallel()
	n := startDeliveryNode(t, []string{"all"}, burstSettings...)
	runKilledMidBurst(t, n, map[int][]string{burstWaves / 2: {"all"}})
}

// runKilledMidBurst posts burstWaves waves of readings to a client's sensors,
// SIGKILLs and restarts the processes named at each wave, then checks what
// the receiver got against the client's event feed and the attempt logs.
func runKilledMidBurst(t *testing.T, n *deliveryNode, kills map[int][]string) {
	sink := startSoakHookSink(t)
	c := n.call("POST", "/v1/clients", deliveryAdminToken, map[string]any{"name": "burst", "webhook_url": sink.url("burst")},
		http.StatusCreated)
	clientID := c["id"].(string)
	sink.setSecret("burst", c["secret"].(string))
	sensors := n.sensors(clientID, "burstDoor", burstSensors)

	for wave := range burstWaves {
		for _, name := range kills[wave] {
			n.procs[name].kill()
			n.start(name)
		}
		// Wave 0 sets every sensor's first state (a change, from none); each
		// later wave flips it.
		n.postUntilTaken(sensors, wave%2)
		// Let the pipeline work between waves, so the kills land while
		// changes are being fanned out and sent.
		time.Sleep(50 * time.Millisecond)
	}

	feed := n.waitClientFeed(clientID, burstSensors*burstWaves)
	last := map[string]string{} // sensor → its last change's event id
	for _, e := range feed {
		last[e.sensor] = e.id
	}
	var states map[string]string
	n.h.waitFor("every change received or superseded, and every sensor's last change received", func() (bool, string) {
		got, _ := sink.received("burst")
		received := map[string]bool{}
		for _, r := range got {
			received[r.id] = true
		}
		states = n.deliveryStates(clientID)
		waiting := 0
		for _, e := range feed {
			if !received[e.id] && (last[e.sensor] == e.id || states[e.id] != "SUPERSEDED") {
				waiting++
			}
		}
		return waiting == 0, fmt.Sprintf("%d of %d changes neither received nor superseded", waiting, len(feed))
	})
	got, bad := sink.received("burst")
	if len(bad) > 0 {
		t.Fatalf("requests that failed verification: %v", bad)
	}
	checkOrderPerSensor(t, feed, got, states)
	n.checkAttemptsLogged(clientID, got)
}

// feedEvent is one event of a client's feed (GET /v1/clients/{id}/events).
type feedEvent struct {
	id, sensor string
	seq        int64
}

// postUntilTaken posts one reading per sensor in one request, again until the
// API takes it (202): the process serving it may be restarting.
func (n *deliveryNode) postUntilTaken(sensors []string, data int) {
	n.t.Helper()
	readings := make([]map[string]any, len(sensors))
	for i, s := range sensors {
		readings[i] = map[string]any{"sensor_id": s, "data": data}
	}
	body, err := json.Marshal(readings)
	if err != nil {
		n.t.Fatal(err)
	}
	n.h.waitFor("the API to take a wave of readings", func() (bool, string) {
		req, err := http.NewRequest("POST", n.api+"/v1/readings", bytes.NewReader(body))
		if err != nil {
			n.t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+deliveryIngestToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusAccepted, "status " + resp.Status
	})
}

// waitClientFeed waits until the client's event feed holds want events and
// returns them in seq order.
func (n *deliveryNode) waitClientFeed(clientID string, want int) []feedEvent {
	n.t.Helper()
	var feed []feedEvent
	n.h.waitFor(fmt.Sprintf("%d events in the client's feed", want), func() (bool, string) {
		feed = feed[:0]
		for after := int64(0); ; {
			page := n.call("GET", fmt.Sprintf("/v1/clients/%s/events?after=%d&limit=1000", clientID, after),
				deliveryAdminToken, nil, http.StatusOK)
			items, _ := page["items"].([]any)
			for _, it := range items {
				e := it.(map[string]any)
				if e["type"] != "state_changed" {
					continue
				}
				feed = append(feed, feedEvent{id: e["id"].(string), sensor: e["sensor"].(map[string]any)["id"].(string),
					seq: int64(e["seq"].(float64))})
			}
			next, ok := page["next_after"].(float64)
			if !ok {
				break
			}
			after = int64(next)
		}
		return len(feed) == want, fmt.Sprintf("%d events", len(feed))
	})
	return feed
}

// checkOrderPerSensor fails t unless each sensor's changes were first received
// in the order of the feed (the order they happened); a change not received
// must be SUPERSEDED (states: webhook delivery state by event id).
func checkOrderPerSensor(t *testing.T, feed []feedEvent, got []hookReceipt, states map[string]string) {
	t.Helper()
	first := map[string][]string{}
	seen := map[string]bool{}
	for _, r := range got {
		if !seen[r.id] {
			seen[r.id] = true
			first[r.sensor] = append(first[r.sensor], r.id)
		}
	}
	want := map[string][]string{}
	superseded := 0
	for _, e := range feed {
		switch {
		case seen[e.id]:
			want[e.sensor] = append(want[e.sensor], e.id)
		case states[e.id] == "SUPERSEDED":
			superseded++
		default:
			t.Errorf("change %s of %s never received (delivery %q)", e.id, e.sensor, states[e.id])
		}
	}
	for sensor, ids := range want {
		if !slices.Equal(first[sensor], ids) {
			t.Errorf("sensor %s's changes were first received in the order %v, want %v", sensor, first[sensor], ids)
		}
	}
	t.Logf("%d changes of %d sensors: %d received (%d requests, %d sent again), %d superseded", len(feed), len(want),
		len(seen), len(got), len(got)-len(seen), superseded)
}

// checkAttemptsLogged waits until every attempt the receiver got (webhook-id
// and attempt number) is in its delivery's attempt log, and fails t naming
// those still missing when processWait ends.
func (n *deliveryNode) checkAttemptsLogged(clientID string, got []hookReceipt) {
	n.t.Helper()
	received := map[string]map[int]bool{}
	for _, r := range got {
		if received[r.id] == nil {
			received[r.id] = map[int]bool{}
		}
		received[r.id][r.attempt] = true
	}
	n.h.waitFor("every received attempt in the attempt log", func() (bool, string) {
		logged := n.loggedAttempts(clientID)
		var missing []string
		for id, attempts := range received {
			for a := range attempts {
				if !logged[id][a] {
					missing = append(missing, fmt.Sprintf("%s#%d", id, a))
				}
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d received attempts not logged, e.g. %v", len(missing), missing[:min(len(missing), 5)])
	})
}

// deliveryStates returns the state of each of the client's webhook deliveries,
// by event id.
func (n *deliveryNode) deliveryStates(clientID string) map[string]string {
	n.t.Helper()
	out := map[string]string{}
	n.eachWebhookDelivery(clientID, func(d map[string]any) { out[d["event_id"].(string)] = d["state"].(string) })
	return out
}

// eachWebhookDelivery calls fn with each of the client's webhook deliveries of
// the last day (GET /v1/clients/{id}/deliveries, every page).
func (n *deliveryNode) eachWebhookDelivery(clientID string, fn func(d map[string]any)) {
	n.t.Helper()
	for cursor := ""; ; {
		page := n.call("GET", "/v1/clients/"+clientID+"/deliveries?limit=1000&cursor="+url.QueryEscape(cursor),
			deliveryAdminToken, nil, http.StatusOK)
		items, _ := page["items"].([]any)
		for _, it := range items {
			if d := it.(map[string]any); d["channel"] == "webhook" {
				fn(d)
			}
		}
		next, _ := page["next_cursor"].(string)
		if next == "" {
			return
		}
		cursor = next
	}
}

// loggedAttempts returns the attempt numbers in the attempt log of each of the
// client's webhook deliveries, by event id.
func (n *deliveryNode) loggedAttempts(clientID string) map[string]map[int]bool {
	n.t.Helper()
	out := map[string]map[int]bool{}
	n.eachWebhookDelivery(clientID, func(d map[string]any) {
		detail := n.call("GET", "/v1/deliveries/"+d["id"].(string), deliveryAdminToken, nil, http.StatusOK)
		event := d["event_id"].(string)
		if out[event] == nil {
			out[event] = map[int]bool{}
		}
		for _, a := range attemptLog(n.t, detail) {
			out[event][int(a["attempt"].(float64))] = true
		}
	})
	return out
}
