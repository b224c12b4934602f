package webapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/webapi"
)

// Every event type a fan-out writes reaches the members' inboxes and live
// streams as a message of its type, with event's severity and a sentence of its
// own (not the fallback "<type> at <sensor>"); a site event reaches the members
// of every client watching one of its sensors, not only the first sensor's.
// One row per event type; a type without a row fails.
func TestInboxAndStreamOfEveryEventType(t *testing.T) {
	t.Parallel()
	a := newInboxAPI(t, webapi.InboxConfig{StreamPing: 50 * time.Millisecond})
	for id, address := range map[string]string{"s1": "1 A Street", "s2": "2 A Street"} {
		a.request("POST", "/v1/sensors", map[string]any{"id": id, "address": address, "site": "yard-b"}).
			expect(http.StatusCreated)
	}
	acme, yard := a.createClient("acme"), a.createClient("yard")
	a.request("PUT", "/v1/clients/"+acme.ID+"/sensors/s1", nil).expect(http.StatusNoContent)
	a.request("PUT", "/v1/clients/"+yard.ID+"/sensors/s2", nil).expect(http.StatusNoContent)
	alice := a.createMember(acme.ID, map[string]any{"name": "Alice"})
	bob := a.createMember(yard.ID, map[string]any{"name": "Bob"}) // sees s2 only: the site events
	aliceStream, bobStream := a.openStream(alice.Token, ""), a.openStream(bob.Token, "")
	aliceStream.hello()
	bobStream.hello()

	where := "1 A Street (s1)"
	cases := []struct {
		typ              event.Type
		data             *int
		site             bool
		severity         string
		subject, message string
	}{
		{event.StateChanged, new(0), false, "info", "s1 unlocked", "The lock at " + where + " was unlocked."},
		{event.ConnectionLost, new(0), false, "critical", "s1 lost its connection",
			"The lock at " + where + " stopped reporting; it was last unlocked."},
		{event.ConnectionLost, new(1), false, "warning", "s1 lost its connection",
			"The lock at " + where + " stopped reporting; it was last locked."},
		{event.ConnectionRestored, new(1), false, "info", "s1 is back online", "The lock at " + where + " reports again."},
		{event.SensorOpenTooLong, new(0), false, "critical", "s1 unlocked too long",
			"The lock at " + where + " has been unlocked for longer than its alert allows."},
		{event.SiteOutage, nil, true, "warning", "site yard-b is out",
			"Several locks of site yard-b lost their connection at once, among them the lock at " + where + "."},
		{event.SiteRestored, nil, true, "info", "site yard-b is back",
			"Most locks of site yard-b report again, among them the lock at " + where + "."},
		{event.MaintenanceEnded, nil, true, "info", "maintenance of s1 ended",
			"A maintenance window of the lock at " + where + " (or its site) ended."},
		{event.SensorUnstable, new(0), false, "info", "s1 is unstable",
			"The lock at " + where + " changes too often; its changes are held until it settles."},
		{event.SensorStable, new(1), false, "info", "s1 settled: locked", "The lock at " + where + " settled; it is locked."},
	}
	covered := map[event.Type]bool{}
	for _, tc := range cases {
		covered[tc.typ] = true
	}
	for _, typ := range event.Types() {
		if !covered[typ] {
			t.Errorf("no case fans out %s", typ)
		}
	}

	var bobSeq int64
	for i, tc := range cases {
		in := storage.NotificationInput{EventID: fmt.Sprintf("every-%d", i), Type: string(tc.typ), SensorID: "s1",
			Data: tc.data, At: inboxT0.Add(time.Duration(i) * time.Minute)}
		if tc.site {
			in.Site, in.Sensors = "yard-b", []string{"s1", "s2"}
		}
		a.fanout(in)
		if sev := string(event.SeverityOf(tc.typ, tc.data)); sev != tc.severity {
			t.Errorf("%s: event.SeverityOf = %s, the case says %s", tc.typ, sev, tc.severity)
		}
		check := func(who string, m messageJSON, seq int64) {
			t.Helper()
			if m.Seq != seq || m.Type != string(tc.typ) || m.Severity != tc.severity || m.Subject != tc.subject ||
				m.Sensor == nil || m.Sensor.ID != "s1" || m.Cause != "event" || !m.At.Equal(in.At) ||
				(m.Data == nil) != (tc.data == nil) || m.Data != nil && *m.Data != *tc.data {
				t.Errorf("%s: %s's message seq %d %+v, want seq %d type %s severity %s subject %q",
					tc.typ, who, m.Seq, m, seq, tc.typ, tc.severity, tc.subject)
			}
			var text string
			if err := json.Unmarshal(m.Message, &text); err != nil || text != tc.message {
				t.Errorf("%s: %s's message text %s (%v), want %q", tc.typ, who, m.Message, err, tc.message)
			}
		}
		live := aliceStream.nextMessage()
		check("alice's stream", live, int64(i+1))
		var stored messageJSON
		a.asMember(alice.Token, "GET", "/v1/messages/"+live.ID, nil).expect(http.StatusOK).decode(&stored)
		check("alice's inbox", stored, int64(i+1))
		if tc.site {
			bobSeq++
			check("bob's stream", bobStream.nextMessage(), bobSeq)
		}
	}
	// Bob's inbox holds the site events only, in order.
	got := a.messages(bob.Token, "?sort-dir=asc")
	var types []string
	for _, m := range *got.Messages {
		types = append(types, m.Type)
	}
	if want := []string{"site_outage", "site_restored", "maintenance_ended"}; !slices.Equal(types, want) {
		t.Errorf("bob's inbox holds %v, want %v", types, want)
	}
}
