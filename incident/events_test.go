package incident_test

import (
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/incident"
	"github.com/lockstream/lockstream/registry"
)

// TestIncidentEventsPublishedOnce: an incident opened by intake, acknowledged
// by a member and resolved by the restore gives its client one
// incident_opened (critical), one incident_acknowledged and one
// incident_resolved, each on the feed with the client's next seq and the
// incident's id, each with one webhook delivery, however many publishers run
// at once and however often; a client of every type (event_types NULL) gets
// none (incident events are subscribed to by name); intake, which reads the
// same feed, opens no incident of them.
func TestIncidentEventsPublishedOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	c := f.client(t, "door1")
	subscribed := []string{"connection_lost", "connection_restored", "incident_opened", "incident_acknowledged",
		"incident_resolved"}
	if _, err := f.reg.UpdateClient(f.ctx, c.ID, registry.ClientUpdate{EventTypes: &subscribed}); err != nil {
		t.Fatal(err)
	}
	f.client(t, "door1") // of every type (NULL): every sensor event, no incident event
	alice := f.member(t, c.ID, "alice")
	f.event(t, "connection_lost", 0, 0, "door1")
	f.intake(t)
	inc := f.incidents(t, c.ID)[0]
	if _, err := f.store.Act(f.ctx, inc.ID, alice.ID, incident.Ack, "api", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	f.event(t, "connection_restored", 0, 2*time.Minute, "door1")
	f.intake(t)

	for range 2 {
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := f.store.PublishEvents(f.ctx, 2); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		for { // what the small limit left behind
			res, err := f.store.PublishEvents(f.ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if res.Events == 0 {
				break
			}
		}
	}
	if res := f.intake(t); res.Opened != 0 || res.Resolved != 0 {
		t.Fatalf("intake of the incident events: %+v", res)
	}

	feed, err := f.pg.ListClientEvents(f.ctx, c.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var types []event.Type
	for i, e := range feed {
		if e.Seq != int64(i+1) {
			t.Fatalf("feed %d has seq %d", i, e.Seq)
		}
		types = append(types, e.Type)
		if e.IncidentID != "" && (e.IncidentID != inc.ID || e.Sensor.ID != "door1") {
			t.Fatalf("incident event %+v", e)
		}
	}
	// Published after both sensor events, in the order they happened.
	want := []event.Type{event.ConnectionLost, event.ConnectionRestored, event.IncidentOpened, event.IncidentAcknowledged,
		event.IncidentResolved}
	if len(types) != len(want) {
		t.Fatalf("feed %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("feed %v, want %v", types, want)
		}
	}
	if sev := feed[2].Severity; sev != event.Critical {
		t.Fatalf("incident_opened of a critical incident has severity %s", sev)
	}

	var hooks map[string]int
	rows, err := f.pg.Pool().Query(f.ctx, `SELECT client_id::text || ' ' || event_type, count(*) FROM deliveries
		WHERE channel = 'webhook' AND event_type LIKE 'incident_%' GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	hooks = map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		hooks[k] = n
	}
	rows.Close()
	for _, typ := range event.Incidents() {
		if n := hooks[c.ID+" "+string(typ)]; n != 1 {
			t.Errorf("%s: %d webhook deliveries, want 1", typ, n)
		}
	}
	if len(hooks) != 3 {
		t.Errorf("webhook deliveries %v: want the subscribed client's three only", hooks)
	}
}
