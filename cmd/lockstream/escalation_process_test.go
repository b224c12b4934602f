package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/notifier/swrve/swrvetest"
)

// The escalation process tests run `lockstream all` with waits of seconds, an
// in-process SMTP server and the fake Swrve, and act as members would.

// escalationSettings writes a push keys file mapping sensor.unseen and returns
// the settings of a node whose escalations wait seconds.
func escalationSettings(t *testing.T, smtpAddr, swrveURL string, more ...string) []string {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "pushkeys.yaml")
	yaml := "swrve:\n  messagePrototypePushKeys:\n    'sensor.unseen':\n      IOS: campaign-unseen-ios\n      ANDROID: campaign-unseen-android\n"
	if err := os.WriteFile(keys, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return append([]string{
		"LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true",
		"LOCKSTREAM_SMTP_URL=smtp://" + smtpAddr,
		"LOCKSTREAM_SWRVE_URL=" + swrveURL + "/push",
		"LOCKSTREAM_SWRVE_PUSH_KEYS=" + keys,
		"LOCKSTREAM_RETRY_BACKOFF_BASE=100ms",
		"LOCKSTREAM_ESCALATION_INTERVAL=200ms",
		"LOCKSTREAM_ESCALATE_PUSH_AFTER=6s",
		"LOCKSTREAM_ESCALATE_EMAIL_AFTER=10s",
	}, more...)
}

// mailbox sorts what the SMTP sink received by recipient.
type mailbox struct {
	sink *mailSink
	mu   sync.Mutex
	by   map[string][]string
}

var toHeader = regexp.MustCompile(`(?mi)^To: *<?([^>\r\n]+)>?\r?$`)

// collect takes every message the sink holds now.
func (m *mailbox) collect() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		select {
		case msg := <-m.sink.got:
			to := "?"
			if g := toHeader.FindStringSubmatch(msg); g != nil {
				to = strings.TrimSpace(g[1])
			}
			m.by[to] = append(m.by[to], msg)
		default:
			return
		}
	}
}

func (m *mailbox) to(addr string) []string {
	m.collect()
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.by[addr]...)
}

// devices counts the pushes Swrve accepted, by device.
type devices struct {
	mu sync.Mutex
	ok map[string]int
}

func (d *devices) answered(r swrvetest.Request, status int) {
	if status != http.StatusOK {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ok[r.User]++
}

func (d *devices) count(device string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ok[device]
}

// member creates a member of the client and returns its id and token.
func (n *deliveryNode) member(clientID string, body map[string]any) (id, token string) {
	n.t.Helper()
	m := n.call("POST", "/v1/clients/"+clientID+"/members", deliveryAdminToken, body, http.StatusCreated)
	return m["id"].(string), m["token"].(string)
}

// seeAll waits until the member has want unseen messages, then marks them all
// seen.
func (n *deliveryNode) seeAll(token string, want int) []streamMessage {
	n.t.Helper()
	var ms []streamMessage
	n.h.waitFor(fmt.Sprintf("%d unseen messages", want), func() (bool, string) {
		total, got := n.inbox(token, "")
		ms = got
		return total >= want, fmt.Sprintf("%d unseen", total)
	})
	n.call("POST", "/v1/messages/seen", token, map[string]any{"all_notifications": true}, http.StatusNoContent)
	return ms
}

// escalations returns the client's escalation deliveries (event type unseen or
// digest) by "<event type> <channel> <target>", and how many are not final yet.
func (n *deliveryNode) escalations(clientID string) (map[string]int, int) {
	n.t.Helper()
	page := n.call("GET", "/v1/clients/"+clientID+"/deliveries?limit=1000", deliveryAdminToken, nil, http.StatusOK)
	out, open := map[string]int{}, 0
	items, _ := page["items"].([]any)
	for _, it := range items {
		d := it.(map[string]any)
		typ, _ := d["event_type"].(string)
		if typ != "unseen" && typ != "digest" {
			continue
		}
		target, _ := d["target"].(string)
		out[fmt.Sprintf("%s %s %s", typ, d["channel"], target)]++
		if s := d["state"]; s != "SENT" && s != "FAILED" && s != "GIVEN_UP" {
			open++
		}
	}
	return out, open
}

// TestEscalationThroughAll: through `lockstream all`, a member who leaves a
// flip unseen gets exactly one email listing it and the flips that followed,
// and one push; one who sees it in time gets none; email off gets no email;
// after seeing everything, the next flip starts a new episode and email;
// marking a message unseen oneself escalates nothing; a member whose client
// was unlinked from the sensor meanwhile gets nothing; a digest member gets
// one digest at its digest time, another with nothing unseen none.
func TestEscalationThroughAll(t *testing.T) {
	t.Parallel()
	mail := newMailSink(t)
	box := &mailbox{sink: mail, by: map[string][]string{}}
	pushed := &devices{ok: map[string]int{}}
	fake := httptest.NewServer(swrvetest.NewServer(swrvetest.Config{Scale: 0.001, Answered: pushed.answered}))
	t.Cleanup(fake.Close)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(receiver.Close)
	// Longer waits than the other escalation tests: before the first push is
	// due, bob, hana and erin must have seen their messages and frank's sensor
	// be unlinked (four waits and about fifteen calls), which a loaded machine
	// can stretch past 6 s.
	n := startDeliveryNode(t, []string{"all"}, escalationSettings(t, mail.addr, fake.URL,
		"LOCKSTREAM_ESCALATE_PUSH_AFTER=12s", "LOCKSTREAM_ESCALATE_EMAIL_AFTER=18s")...)

	home, _ := n.watcher("home", receiver.URL, "escDoorA")
	away, _ := n.watcher("away", receiver.URL, "escDoorB")
	solo, _ := n.watcher("solo", receiver.URL, "escDoorC")
	club, _ := n.watcher("club", receiver.URL, "escDoorD")
	device := func(name string) []map[string]any {
		return []map[string]any{{"platform": "IOS", "push_key": "dev-" + name}}
	}
	_, aliceToken := n.member(home, map[string]any{"name": "alice", "email": "alice@example.com", "push_targets": device("alice")})
	_, bobToken := n.member(home, map[string]any{"name": "bob", "email": "bob@example.com", "push_targets": device("bob")})
	n.member(home, map[string]any{"name": "carol", "email": "carol@example.com", "push_targets": device("carol"),
		"preferences": map[string]any{"email": "off"}})
	_, erinToken := n.member(solo, map[string]any{"name": "erin", "email": "erin@example.com", "push_targets": device("erin")})
	_, frankToken := n.member(away, map[string]any{"name": "frank", "email": "frank@example.com", "push_targets": device("frank")})
	// Digest members, of a client of their own: the digest time is the next
	// minute at least 30 s away (their messages arrive well before it), in
	// their timezone.
	tz := "Asia/Kolkata" // +05:30, so a wrong zone would miss the time by hours
	loc, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	digestAt := time.Now().Add(30 * time.Second).In(loc).Truncate(time.Minute).Add(time.Minute)
	digest := map[string]any{"email": "digest", "push": false, "digest_times": []string{digestAt.Format("15:04")}}
	n.member(club, map[string]any{"name": "gina", "email": "gina@example.com", "timezone": tz, "preferences": digest})
	_, hanaToken := n.member(club, map[string]any{"name": "hana", "email": "hana@example.com", "timezone": tz, "preferences": digest})

	n.flip("escDoorA", 1)
	n.flip("escDoorB", 1)
	n.flip("escDoorC", 1)
	n.flip("escDoorD", 1)
	n.flip("escDoorA", 0) // joins the episodes the first flip opened
	n.flip("escDoorD", 0)
	n.seeAll(bobToken, 2)
	n.seeAll(hanaToken, 2)
	// Erin sees hers, then marks it unseen herself.
	for _, m := range n.seeAll(erinToken, 1) {
		n.call("POST", "/v1/messages/"+m.ID+"/unseen", erinToken, nil, http.StatusNoContent)
	}
	// Frank's client stops watching his sensor before the wait is over.
	n.h.waitFor("frank's message", func() (bool, string) {
		total, _ := n.inbox(frankToken, "")
		return total == 1, fmt.Sprintf("%d unseen", total)
	})
	n.call("DELETE", "/v1/clients/"+away+"/sensors/escDoorB", deliveryAdminToken, nil, http.StatusNoContent)

	// Alice: one push, then one email listing both flips, newest first.
	n.h.waitFor("alice's email", func() (bool, string) {
		got := box.to("alice@example.com")
		return len(got) >= 1, fmt.Sprintf("%d emails, %d pushes", len(got), pushed.count("dev-alice"))
	})
	first := box.to("alice@example.com")[0]
	for _, want := range []string{"2 unseen notifications about sensor escDoorA", "became unlocked", "became locked"} {
		if !strings.Contains(first, want) {
			t.Fatalf("alice's email lacks %q:\n%s", want, first)
		}
	}
	if strings.Index(first, "became unlocked") > strings.Index(first, "became locked") {
		t.Errorf("alice's email does not list the newest first:\n%s", first)
	}
	n.h.waitFor("alice's push", func() (bool, string) { return pushed.count("dev-alice") == 1, "" })

	// Alice sees everything: the next flip is a new episode, and a new email.
	n.seeAll(aliceToken, 2)
	n.flip("escDoorA", 1)
	n.seeAll(bobToken, 1)
	n.h.waitFor("alice's second email and push", func() (bool, string) {
		got := box.to("alice@example.com")
		return len(got) == 2 && pushed.count("dev-alice") == 2, fmt.Sprintf("%d emails, %d pushes", len(got), pushed.count("dev-alice"))
	})
	if second := box.to("alice@example.com")[1]; !strings.Contains(second, "1 unseen notification about sensor escDoorA") {
		t.Errorf("alice's second email:\n%s", second)
	}

	// Gina's digest, at its time, lists her two flips.
	n.h.waitFor("gina's digest at "+digestAt.Format(time.RFC3339), func() (bool, string) {
		return len(box.to("gina@example.com")) == 1, fmt.Sprintf("now %s", time.Now().In(loc).Format(time.RFC3339))
	})
	if d := box.to("gina@example.com")[0]; !strings.Contains(d, "2 unseen notifications") {
		t.Errorf("gina's digest:\n%s", d)
	}

	// Every escalation is final: count them, in the outbox and as received.
	var got map[string]int
	n.h.waitFor("every escalation delivered", func() (bool, string) {
		got = map[string]int{}
		openAll := 0
		for _, c := range []string{home, away, solo, club} {
			byKind, open := n.escalations(c)
			openAll += open
			for k, v := range byKind {
				got[k] += v
			}
		}
		return openAll == 0, fmt.Sprintf("%d open: %v", openAll, got)
	})
	wantPushes := map[string]int{"dev-alice": 2, "dev-carol": 1, "dev-bob": 0, "dev-erin": 0, "dev-frank": 0}
	for dev, want := range wantPushes {
		if c := pushed.count(dev); c != want {
			t.Errorf("%s got %d pushes, want %d (outbox: %v)", dev, c, want, got)
		}
	}
	wantMail := map[string]int{"alice": 2, "bob": 0, "carol": 0, "erin": 0, "frank": 0, "gina": 1, "hana": 0}
	for name, want := range wantMail {
		if c := len(box.to(name + "@example.com")); c != want {
			t.Errorf("%s got %d emails, want %d (outbox: %v)", name, c, want, got)
		}
	}
	emails, pushes := 0, 0
	for k, v := range got {
		if strings.Contains(k, " email ") {
			emails += v
		} else {
			pushes += v
		}
	}
	if emails != 3 || pushes != 3 {
		t.Errorf("the outbox holds %d escalation emails and %d pushes, want 3 and 3: %v", emails, pushes, got)
	}
}
