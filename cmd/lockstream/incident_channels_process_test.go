package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lockstream/lockstream/notifier/swrve/swrvetest"
)

// TestIncidentReminderEmailAndPushThroughAll: through `lockstream all` with
// the SMTP sink and the fake Swrve, a sensor lost while unlocked reminds its
// client's member in the inbox, by email and by push (prototype
// incident.reminder), and the email and the push both carry the reminder's
// one-click ack link, LOCKSTREAM_PUBLIC_URL + /ack/<token>, the same as the
// inbox message's.
func TestIncidentReminderEmailAndPushThroughAll(t *testing.T) {
	t.Parallel()
	mail := newMailSink(t)
	box := &mailbox{sink: mail, by: map[string][]string{}}
	var (
		mu     sync.Mutex
		pushes []swrvetest.Request
	)
	fake := httptest.NewServer(swrvetest.NewServer(swrvetest.Config{Scale: 0.001,
		Answered: func(r swrvetest.Request, status int) {
			if status == http.StatusOK {
				mu.Lock()
				pushes = append(pushes, r)
				mu.Unlock()
			}
		}}))
	t.Cleanup(fake.Close)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(receiver.Close)
	keys := filepath.Join(t.TempDir(), "incidentkeys.yaml")
	yaml := "swrve:\n  messagePrototypePushKeys:\n    'incident.reminder':\n      IOS: campaign-incident-ios\n      ANDROID: campaign-incident-android\n"
	if err := os.WriteFile(keys, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	const public = "https://ls.example.com"
	n := startDeliveryNode(t, []string{"all"}, escalationSettings(t, mail.addr, fake.URL,
		"LOCKSTREAM_SWRVE_PUSH_KEYS="+keys, "LOCKSTREAM_PUBLIC_URL="+public,
		"LOCKSTREAM_HEARTBEAT_TIMEOUT=3s", "LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL=200ms")...)
	client, _ := n.watcher("owner", receiver.URL, "incMailDoor")
	_, aliceToken := n.member(client, map[string]any{"name": "alice", "email": "alice@example.com",
		"push_targets": []map[string]any{{"platform": "IOS", "push_key": "dev-alice"}}})
	n.call("PUT", "/v1/clients/"+client+"/escalation-policy", deliveryAdminToken, map[string]any{
		"severities": []string{"critical"}, "repeat_every": "1h", "loops": 2, "tiers": []map[string]any{{"after": "0s"}},
	}, http.StatusOK)

	n.flip("incMailDoor", 0) // unlocked, then silent: lost while unlocked
	var link string
	n.h.waitFor("alice's reminder", func() (bool, string) {
		r := n.reminders(aliceToken)
		if len(r) > 0 {
			link = r[0].AckURL
		}
		return len(r) > 0, fmt.Sprintf("%d reminders", len(r))
	})
	if !strings.HasPrefix(link, public+"/ack/") {
		t.Fatalf("the reminder's link %q", link)
	}
	n.h.waitFor("the reminder's email with its ack link", func() (bool, string) {
		for _, m := range box.to("alice@example.com") {
			// Quoted-printable bodies break long lines softly.
			if plain := strings.ReplaceAll(m, "=\r\n", ""); strings.Contains(plain, "Acknowledge (one click): "+link) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d emails to alice", len(box.to("alice@example.com")))
	})
	n.h.waitFor("the reminder's push with its ack link", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range pushes {
			if p.PushKey == "campaign-incident-ios" && p.User == "dev-alice" && strings.Contains(p.Message, link) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pushes", len(pushes))
	})

	// The email's link as a mail scanner and then alice use it: a GET shows
	// the button and acknowledges nothing; the POST acknowledges, once; a
	// second use says the link was used.
	ackURL := n.api + strings.TrimPrefix(link, public)
	if status, page := fetchPage(t, "GET", ackURL); status != http.StatusOK || !strings.Contains(page, "<form") {
		t.Fatalf("GET of the ack link = %d:\n%s", status, page)
	}
	if open := n.incidents(client, "open"); len(open) != 1 {
		t.Fatalf("after a GET of the ack link: %d open incidents, want 1 (a GET acknowledges nothing)", len(open))
	}
	if status, page := fetchPage(t, "POST", ackURL); status != http.StatusOK || !strings.Contains(page, "Acknowledged") {
		t.Fatalf("POST of the ack link = %d:\n%s", status, page)
	}
	acked := n.incidents(client, "acknowledged")
	if len(acked) != 1 {
		t.Fatalf("after the ack link's POST: %d acknowledged incidents, want 1", len(acked))
	}
	if status, page := fetchPage(t, "POST", ackURL); status != http.StatusGone || !strings.Contains(page, "used already") {
		t.Fatalf("a second use of the ack link = %d:\n%s", status, page)
	}
	inc := n.call("GET", "/v1/incidents/"+acked[0]["id"].(string), aliceToken, nil, http.StatusOK)
	var acks []string
	for _, e := range inc["timeline"].([]any) {
		if entry := e.(map[string]any); entry["kind"] == "ack" {
			acks = append(acks, fmt.Sprint(entry["channel"]))
		}
	}
	if len(acks) != 1 || acks[0] != "link" {
		t.Errorf("the timeline's acks %v, want one on channel link", acks)
	}
}

// fetchPage makes a request without a body and returns its status and body.
func fetchPage(t *testing.T, method, u string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
