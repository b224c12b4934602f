package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// incidentReminder is an incident_reminder message's JSON.
type incidentReminder struct {
	IncidentID string    `json:"incident_id"`
	Tier       int       `json:"tier"`
	DueAt      time.Time `json:"due_at"`
	OpenedAt   time.Time `json:"opened_at"`
	AckURL     string    `json:"ack_url"`
}

// reminders returns the member's incident reminders, oldest first.
func (n *deliveryNode) reminders(token string) []incidentReminder {
	n.t.Helper()
	body := n.call("GET", "/v1/messages?message-type=incident_reminder&seen=true&limit=1000&sort-dir=asc", token, nil, http.StatusOK)
	var ms []struct {
		Message incidentReminder `json:"message"`
	}
	raw, _ := json.Marshal(body["messages"])
	if err := json.Unmarshal(raw, &ms); err != nil {
		n.t.Fatal(err)
	}
	out := make([]incidentReminder, len(ms))
	for i, m := range ms {
		out[i] = m.Message
	}
	return out
}

// incidents returns the client's incidents in state ("" any), newest first.
func (n *deliveryNode) incidents(clientID, state string) []map[string]any {
	n.t.Helper()
	page := n.call("GET", "/v1/clients/"+clientID+"/incidents?state="+url.QueryEscape(state), deliveryAdminToken, nil, http.StatusOK)
	var out []map[string]any
	items, _ := page["items"].([]any)
	for _, it := range items {
		out = append(out, it.(map[string]any))
	}
	return out
}

// TestIncidentThroughAll: through `lockstream all` with waits of seconds, a
// sensor lost while unlocked opens one incident; tier 1 is reminded every
// repeat_every (due times opening + 0, 2, 4… s) until the ack; tier 2 joins
// at opening + its after; an ack by a tier-2 member stops every reminder (none
// after it in the timeline, though rounds go on reminding of a second
// incident); the restore resolves it with its duration. The checks compare
// due times the schedule computes, never how long anything took.
func TestIncidentThroughAll(t *testing.T) {
	t.Parallel()
	n := startDeliveryNode(t, []string{"all"},
		"LOCKSTREAM_HEARTBEAT_TIMEOUT=3s", "LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL=200ms",
		"LOCKSTREAM_ESCALATION_INTERVAL=200ms")
	receiver := startBodySink(t)
	client, _ := n.watcher("owner", receiver.server.URL, "incDoor")
	alice, aliceToken := n.member(client, map[string]any{"name": "alice"})
	bob, bobToken := n.member(client, map[string]any{"name": "bob"})
	// Carol is in tier 1 but routed to another site: her routing wins, she
	// hears nothing of the doors (no message, no reminder, no incident listed).
	carol, carolToken := n.member(client, map[string]any{"name": "carol"})
	n.call("PATCH", "/v1/members/"+carol, deliveryAdminToken, map[string]any{"routing": map[string]any{"sites": []string{"depot"}}},
		http.StatusOK)
	n.call("PUT", "/v1/clients/"+client+"/escalation-policy", deliveryAdminToken, map[string]any{
		"severities": []string{"critical"}, "repeat_every": "2s", "loops": 1000,
		"tiers": []map[string]any{{"after": "0s", "members": []string{alice, carol}}, {"after": "6s", "members": []string{bob}}},
	}, http.StatusOK)

	n.flip("incDoor", 0) // unlocked, then silent: lost while unlocked
	var inc map[string]any
	n.h.waitFor("one open incident", func() (bool, string) {
		open := n.incidents(client, "open")
		if len(open) == 1 {
			inc = open[0]
		}
		return len(open) == 1, fmt.Sprintf("%d open", len(open))
	})
	id := inc["id"].(string)
	if inc["subject"] != "sensor:incDoor" || inc["severity"] != "critical" || inc["type"] != "connection_lost" {
		t.Fatalf("incident %v", inc)
	}
	// Tier 2 joins; by then tier 1 was reminded at 0, 2, 4 and 6 s.
	n.h.waitFor("bob's first reminder", func() (bool, string) {
		got := len(n.reminders(bobToken))
		return got >= 1, fmt.Sprintf("bob has %d", got)
	})
	n.h.waitFor("alice's fourth reminder", func() (bool, string) {
		got := len(n.reminders(aliceToken))
		return got >= 4, fmt.Sprintf("alice has %d", got)
	})
	aliceGot, bobGot := n.reminders(aliceToken), n.reminders(bobToken)
	opened := aliceGot[0].OpenedAt
	for i, r := range aliceGot[:4] {
		if r.IncidentID != id || r.Tier != 1 || !r.DueAt.Equal(opened.Add(time.Duration(2*i)*time.Second)) {
			t.Errorf("alice's reminder %d: %+v, want tier 1 due at opening + %ds", i, r, 2*i)
		}
	}
	if r := bobGot[0]; r.Tier != 2 || !r.DueAt.Equal(opened.Add(6*time.Second)) {
		t.Errorf("bob's first reminder %+v, want tier 2 due at opening + 6s", r)
	}

	// Bob acknowledges: every reminder stops.
	acked := n.call("POST", "/v1/incidents/"+id+"/ack", bobToken, nil, http.StatusOK)
	if acked["state"] != "acknowledged" || acked["acknowledged_by"] != bob {
		t.Fatalf("acked %v", acked)
	}
	n.call("POST", "/v1/incidents/"+id+"/ack", aliceToken, nil, http.StatusOK) // twice: a 200 that changes nothing
	// Rounds go on: a second door's incident reminds alice, well after the
	// first one's next due time.
	n.call("POST", "/v1/sensors", deliveryAdminToken, map[string]any{"id": "incDoor2", "address": "2 Door Street"}, http.StatusCreated)
	n.call("PUT", "/v1/clients/"+client+"/sensors/incDoor2", deliveryAdminToken, nil, http.StatusNoContent)
	n.flip("incDoor2", 0)
	n.h.waitFor("a reminder of the second incident", func() (bool, string) {
		for _, r := range n.reminders(aliceToken) {
			if r.IncidentID != id {
				return true, ""
			}
		}
		return false, "none yet"
	})
	// The restore resolves it.
	n.flip("incDoor", 1)
	n.h.waitFor("the incident resolved", func() (bool, string) {
		got := n.call("GET", "/v1/incidents/"+id, aliceToken, nil, http.StatusOK)
		inc = got
		return got["state"] == "resolved", fmt.Sprint(got["state"])
	})
	if inc["resolved_event"] == "" || inc["acknowledged_by"] != bob {
		t.Errorf("resolved incident %v", inc)
	}
	// The timeline: opened, reminders, the ack, then no reminder, then the resolve.
	var kinds []string
	for _, e := range inc["timeline"].([]any) {
		kinds = append(kinds, e.(map[string]any)["kind"].(string))
	}
	line := strings.Join(kinds, ",")
	ack := strings.Index(line, "ack")
	if !strings.HasPrefix(line, "opened,reminder") || ack < 0 || strings.Contains(line[ack:], "reminder") ||
		!strings.HasSuffix(line, "resolve") {
		t.Errorf("timeline %s: want opened, reminders, the ack, the resolve and no reminder after the ack", line)
	}
	if open := n.incidents(client, ""); len(open) != 2 {
		t.Errorf("%d incidents, want 2 (one per door): %v", len(open), open)
	}
	// Checked last, after everyone else heard of both doors many times.
	all := n.call("GET", "/v1/messages?seen=true&limit=1000", carolToken, nil, http.StatusOK)
	listed := n.call("GET", "/v1/incidents", carolToken, nil, http.StatusOK)
	// (The client's operational notices, about no door, reach her.)
	msgs, _ := all["messages"].([]any)
	for _, m := range msgs {
		if msg := m.(map[string]any); msg["sensor"] != nil || msg["type"] == "incident_reminder" {
			t.Errorf("carol, routed to another site, has a message about the doors: %v", msg)
		}
	}
	if items, _ := listed["items"].([]any); len(items) != 0 {
		t.Errorf("carol, routed to another site, lists %d incidents", len(items))
	}
}
