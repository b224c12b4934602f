package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/notifier/swrve/swrvetest"
)

// pushLog keeps the text of every push Swrve accepted, by device.
type pushLog struct {
	mu  sync.Mutex
	got map[string][]string
}

func (p *pushLog) answered(r swrvetest.Request, status int) {
	if status != http.StatusOK {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got[r.User] = append(p.got[r.User], r.Message)
}

func (p *pushLog) to(device string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got[device]...)
}

// memberEscalations returns the client's escalation deliveries (unseen) of one
// member's email or device, by state, with their last errors.
func (n *deliveryNode) memberEscalations(clientID, target string) map[string][]string {
	n.t.Helper()
	page := n.call("GET", "/v1/clients/"+clientID+"/deliveries?limit=1000", deliveryAdminToken, nil, http.StatusOK)
	out := map[string][]string{}
	items, _ := page["items"].([]any)
	for _, it := range items {
		d := it.(map[string]any)
		if d["event_type"] != "unseen" || d["target"] != target {
			continue
		}
		last, _ := d["last_error"].(string)
		out[d["state"].(string)] = append(out[d["state"].(string)], last)
	}
	return out
}

// TestQuietHoursThroughAll: through `lockstream all` with an SMTP sink and the
// fake Swrve. Quinn's quiet hours last now (whatever the hour: from an hour
// ago to two hours on, on her UTC wall clock): the escalation of a warning
// (a door lost while locked) is held — its email and push wait, RETRY until
// the quiet hours end — while a critical (a door lost while unlocked) reaches
// her email and phone at once. Dana, a digest member whose digest is twelve
// hours away, gets an email of the critical at once and none of the warning.
// The restore of the critical door tells its outage length in the client's
// webhook, the client's email and the members' inbox message.
func TestQuietHoursThroughAll(t *testing.T) {
	t.Parallel()
	mail := newMailSink(t)
	box := &mailbox{sink: mail, by: map[string][]string{}}
	pushed := &pushLog{got: map[string][]string{}}
	fake := httptest.NewServer(swrvetest.NewServer(swrvetest.Config{Scale: 0.001, Answered: pushed.answered}))
	t.Cleanup(fake.Close)
	receiver := startBodySink(t)
	n := startDeliveryNode(t, []string{"all"}, escalationSettings(t, mail.addr, fake.URL,
		"LOCKSTREAM_HEARTBEAT_TIMEOUT=4s", "LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL=200ms")...)

	c := n.call("POST", "/v1/clients", deliveryAdminToken, map[string]any{"name": "quiet", "webhook_url": receiver.server.URL,
		"email": "owner@example.com"}, http.StatusCreated)
	client := c["id"].(string)
	receiver.mu.Lock()
	receiver.secret = c["secret"].(string)
	receiver.mu.Unlock()
	// A registered sensor that has not reported is lost after the heartbeat's
	// timeout: each door is registered right before its first reading.
	door := func(id string, data int) {
		n.call("POST", "/v1/sensors", deliveryAdminToken, map[string]any{"id": id, "address": "1 " + id + " Street"}, http.StatusCreated)
		n.call("PUT", "/v1/clients/"+client+"/sensors/"+id, deliveryAdminToken, nil, http.StatusNoContent)
		n.flip(id, data)
	}
	now := time.Now().UTC()
	quinn, quinnToken := n.member(client, map[string]any{"name": "quinn", "email": "quinn@example.com", "timezone": "UTC",
		"push_targets": []map[string]any{{"platform": "IOS", "push_key": "dev-quinn"}}})
	n.call("PATCH", "/v1/members/"+quinn, deliveryAdminToken, map[string]any{"quiet_hours": map[string]any{
		"from": now.Add(-time.Hour).Format("15:04"), "to": now.Add(2 * time.Hour).Format("15:04")}}, http.StatusOK)
	n.member(client, map[string]any{"name": "dana", "email": "dana@example.com", "timezone": "UTC",
		"preferences": map[string]any{"email": "digest", "push": false, "digest_times": []string{now.Add(12 * time.Hour).Format("15:04")}}})

	// The warning first, alone: its escalation email and push are held.
	door("qtWarn", 1)
	n.h.waitFor("quinn's warning email and push held", func() (bool, string) {
		mailHeld := n.memberEscalations(client, "member:"+quinn)["RETRY"]
		pushHeld := n.memberEscalations(client, "IOS:dev-quinn")["RETRY"]
		return len(mailHeld) == 1 && len(pushHeld) == 1, fmt.Sprintf("email %v, push %v", mailHeld, pushHeld)
	})
	for _, target := range []string{"member:" + quinn, "IOS:dev-quinn"} {
		got := n.memberEscalations(client, target)
		if len(got) != 1 || !strings.Contains(got["RETRY"][0], "quiet hours last until") {
			t.Fatalf("quinn's escalations to %s: %v, want one held for her quiet hours", target, got)
		}
	}

	// The critical: it reaches quinn at once, quiet hours or not, and dana at once.
	door("qtCrit", 0)
	n.h.waitFor("quinn's critical email and push, dana's critical email", func() (bool, string) {
		return len(box.to("quinn@example.com")) >= 1 && len(pushed.to("dev-quinn")) >= 1 && len(box.to("dana@example.com")) >= 1,
			fmt.Sprintf("quinn %d emails %d pushes, dana %d emails", len(box.to("quinn@example.com")),
				len(pushed.to("dev-quinn")), len(box.to("dana@example.com")))
	})
	for _, m := range append(box.to("quinn@example.com"), box.to("dana@example.com")...) {
		if !strings.Contains(m, "qtCrit") || strings.Contains(m, "qtWarn") {
			t.Errorf("an email during quinn's quiet hours or before dana's digest is not the critical door's alone:\n%s", m)
		}
	}
	if held := n.memberEscalations(client, "member:"+quinn)["RETRY"]; len(held) != 1 {
		t.Errorf("quinn's email escalations: %v, want the warning's alone held; she received:\n%s",
			n.memberEscalations(client, "member:"+quinn), strings.Join(box.to("quinn@example.com"), "\n-----\n"))
	}

	// The critical door comes back: every channel says how long it was lost.
	n.flip("qtCrit", 1)
	n.h.waitFor("the restore's webhook, email and inbox message", func() (bool, string) {
		return restoredWebhook(receiver, "qtCrit") && restoredMail(box.to("owner@example.com"), "qtCrit") != "" &&
			restoredInbox(n, quinnToken, "qtCrit") != "", "not yet"
	})
	if m := restoredMail(box.to("owner@example.com"), "qtCrit"); !strings.Contains(m, "lost for") {
		t.Errorf("the client's restore email does not say how long the door was lost:\n%s", m)
	}
	if m := restoredInbox(n, quinnToken, "qtCrit"); !strings.Contains(m, `"silent_seconds"`) || !strings.Contains(m, "back online after") {
		t.Errorf("quinn's restore message does not say how long the door was lost: %s", m)
	}
}

// restoredWebhook says whether the sink accepted the sensor's
// connection_restored with its outage (silent_seconds > 0).
func restoredWebhook(s *bodySink, sensor string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.accepted {
		if b.Type == "connection_restored" && b.Sensor.ID == sensor && b.SilentSeconds > 0 && b.LostSince != nil {
			return true
		}
	}
	return false
}

// restoredMail returns the first email about the sensor's restore.
func restoredMail(mails []string, sensor string) string {
	for _, m := range mails {
		if strings.Contains(m, sensor) && strings.Contains(strings.ToLower(m), "restored") {
			return m
		}
	}
	return ""
}

// restoredInbox returns the member's connection_restored message about the
// sensor, as JSON.
func restoredInbox(n *deliveryNode, token, sensor string) string {
	body := n.call("GET", "/v1/messages?seen=true&limit=1000&message-type=connection_restored", token, nil, http.StatusOK)
	msgs, _ := body["messages"].([]any)
	for _, m := range msgs {
		raw, _ := json.Marshal(m)
		if strings.Contains(string(raw), sensor) {
			return string(raw)
		}
	}
	return ""
}
