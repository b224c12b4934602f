package email_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/email"
)

func TestSendUnseenAndDigest(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, smtpOptions{})
	s := newSender(t, email.Config{SMTPURL: srv.url("smtp"), From: "lockstream <alerts@lockstream.test>"})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	u := notifier.Unseen{ID: "0190-esc", MemberName: "Alice", Timezone: "Europe/Paris",
		Messages: []notifier.UnseenMessage{
			{Type: "connection_lost", SensorID: "door1", SensorAddress: "Main St <1>", Severity: "critical",
				Data: intp(0), At: at.Add(time.Minute)},
			{Type: "state_changed", SensorID: "door1", SensorAddress: "Main St <1>", Severity: "info",
				Data: intp(1), At: at},
		}}
	if res := s.SendUnseen(t.Context(), "alice@example.com", u); res.Outcome != notifier.Sent {
		t.Fatalf("result = %+v, want Sent", res)
	}
	m := parse(t, srv.next(t).data)
	if m.subject != "2 unseen notifications about sensor door1" || m.header.Get("Message-Id") != "<0190-esc@lockstream>" {
		t.Errorf("subject %q, Message-ID %q", m.subject, m.header.Get("Message-Id"))
	}
	mustContain(t, "text part", m.text, "Hello Alice", "these 2 notifications about sensor door1",
		"Sun, 22 Nov 2026 11:01 CET: Sensor door1 (Main St <1>) lost its connection while unlocked [CRITICAL]",
		"Sun, 22 Nov 2026 11:00 CET: Sensor door1 (Main St <1>) became locked")
	mustContain(t, "HTML part", m.html, "Main St &lt;1&gt;", `datetime="2026-11-22T10:00:00Z"`, "(critical)</strong>")
	if strings.Contains(m.html, "<1>") {
		t.Error("the HTML part carries the address unescaped")
	}

	d := notifier.Unseen{ID: "0190-dig", Digest: true, MemberName: "Hana", Timezone: "UTC",
		Messages: []notifier.UnseenMessage{{Type: "invoice", Subject: "Your invoice is ready", Severity: "info", At: at}}}
	if res := s.SendUnseen(t.Context(), "hana@example.com", d); res.Outcome != notifier.Sent {
		t.Fatalf("digest result = %+v, want Sent", res)
	}
	m = parse(t, srv.next(t).data)
	if m.subject != "Your lockstream digest: 1 unseen notification" {
		t.Errorf("digest subject %q", m.subject)
	}
	mustContain(t, "digest text", m.text, "1 notification has arrived", "Sun, 22 Nov 2026 10:00 UTC: Your invoice is ready")

	// Nothing to list is not sent.
	if res := s.SendUnseen(t.Context(), "hana@example.com", notifier.Unseen{ID: "x"}); res.Outcome != notifier.Failed {
		t.Fatalf("an empty escalation: %+v, want Failed", res)
	}
}

// A free-form notification's email carries its subject as the mail's subject.
func TestSendNotificationEmail(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, smtpOptions{})
	s := newSender(t, email.Config{SMTPURL: srv.url("smtp"), From: "lockstream <alerts@lockstream.test>"})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	n := notifier.Unseen{ID: "0190-note", Notification: true, MemberName: "Hana", Timezone: "UTC",
		Messages: []notifier.UnseenMessage{{Type: "invoice", Subject: "Your invoice <3> is ready", Severity: "info", At: at}}}
	if res := s.SendUnseen(t.Context(), "hana@example.com", n); res.Outcome != notifier.Sent {
		t.Fatalf("result = %+v, want Sent", res)
	}
	m := parse(t, srv.next(t).data)
	if m.subject != "Your invoice <3> is ready" {
		t.Errorf("subject %q", m.subject)
	}
	mustContain(t, "text part", m.text, "Hello Hana", "Your invoice <3> is ready", "(Sun, 22 Nov 2026 10:00 UTC)", "in your lockstream inbox")
	mustContain(t, "HTML part", m.html, "Your invoice &lt;3&gt; is ready")
}

// An escalation lists each message in a sentence of its own type, not the
// fallback "Sensor x: <type>": one row per event type, and a type without a
// row fails.
func TestUnseenTitleOfEveryEventType(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, smtpOptions{})
	s := newSender(t, email.Config{SMTPURL: srv.url("smtp")})
	titles := map[event.Type]string{
		event.StateChanged:       "Sensor d1 (Gate) became unlocked",
		event.ConnectionLost:     "Sensor d1 (Gate) lost its connection while unlocked",
		event.ConnectionRestored: "Sensor d1 (Gate) is back online, unlocked",
		event.SensorOpenTooLong:  "Sensor d1 (Gate) has been unlocked too long",
		event.SiteOutage:         "Site yard-b lost several sensors at once, among them sensor d1 (Gate)",
		event.SiteRestored:       "Site yard-b is back, among them sensor d1 (Gate)",
		event.MaintenanceEnded:   "A maintenance window of sensor d1 (Gate) or its site ended",
		event.SensorUnstable:     "Sensor d1 (Gate) changes too often, unlocked now",
		event.SensorStable:       "Sensor d1 (Gate) settled, unlocked",
	}
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, typ := range event.Types() {
		want, ok := titles[typ]
		if !ok {
			t.Errorf("no title expected for %s", typ)
			continue
		}
		u := notifier.Unseen{ID: "esc-" + string(typ), MemberName: "Alice", Timezone: "UTC",
			Messages: []notifier.UnseenMessage{{Type: string(typ), SensorID: "d1", SensorAddress: "Gate",
				SensorSite: "yard-b", Severity: string(event.SeverityOf(typ, intp(0))), Data: intp(0), At: at}}}
		if res := s.SendUnseen(t.Context(), "alice@example.com", u); res.Outcome != notifier.Sent {
			t.Fatalf("%s: result = %+v, want Sent", typ, res)
		}
		m := parse(t, srv.next(t).data)
		mustContain(t, string(typ)+" text", m.text, "Sun, 22 Nov 2026 10:00 UTC: "+want)
	}
}

// An incident reminder's email, alone or listed in an escalation, carries its
// one-click ack link in the text and as a link in the HTML.
func TestIncidentReminderEmailCarriesAckLink(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, smtpOptions{})
	s := newSender(t, email.Config{SMTPURL: srv.url("smtp"), From: "lockstream <alerts@lockstream.test>"})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	const link = "https://ls.example.com/ack/0123456789abcdef0123456789abcdef"
	reminder := notifier.UnseenMessage{Type: "incident_reminder", Subject: "Incident not acknowledged: connection_lost of sensor:door1",
		Severity: "critical", At: at, AckURL: link}
	for _, u := range []notifier.Unseen{
		{ID: "0190-inc", Notification: true, MemberName: "Alice", Timezone: "UTC", Messages: []notifier.UnseenMessage{reminder}},
		{ID: "0190-esc", MemberName: "Alice", Timezone: "UTC", Messages: []notifier.UnseenMessage{reminder}},
	} {
		if res := s.SendUnseen(t.Context(), "alice@example.com", u); res.Outcome != notifier.Sent {
			t.Fatalf("result = %+v, want Sent", res)
		}
		m := parse(t, srv.next(t).data)
		mustContain(t, u.ID+" text part", m.text, "Incident not acknowledged", "Acknowledge (one click): "+link)
		mustContain(t, u.ID+" HTML part", m.html, `<a href="`+link+`">Acknowledge</a>`)
	}
}
