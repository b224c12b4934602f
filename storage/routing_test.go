package storage_test

import (
	"slices"
	"testing"
	"time"

	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// route sets the member's routing.
func (f *outboxFixture) route(t *testing.T, m registry.Member, r registry.MemberRouting) {
	t.Helper()
	got, err := f.reg.UpdateMember(f.ctx, m.ID, registry.MemberUpdate{Routing: &r})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Routing.Sites, r.Sites) || !slices.Equal(got.Routing.Sensors, r.Sensors) {
		t.Fatalf("routing stored as %+v, want %+v", got.Routing, r)
	}
}

// inboxKeys lists the member's messages as type@sensor.
func (f *outboxFixture) inboxKeys(t *testing.T, m registry.Member) []string {
	t.Helper()
	var keys []string
	for _, msg := range f.inbox(t, m.ID) {
		keys = append(keys, msg.Type+"@"+msg.SensorID)
	}
	return keys
}

// Each member's inbox holds only what its routing lets through: its sites
// (a sensor's site, or a site event's), its sensors, its least severity;
// notices pass on their severity alone; the default hears everything; and
// routing back to the default hears everything again.
func TestInboxFollowsMemberRouting(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t)
	for _, s := range []registry.Sensor{{ID: "rN1", Address: "a", Site: "north"}, {ID: "rN2", Address: "b", Site: "north"}, {ID: "rS1", Address: "c", Site: "south"}} {
		if _, err := f.reg.CreateSensor(f.ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	c := f.Client(t, registry.Client{Name: "routed"}, "rN1", "rN2", "rS1")
	all := f.Member(t, c.ID, "all", registry.Backfill{})
	north := f.Member(t, c.ID, "north", registry.Backfill{})
	one := f.Member(t, c.ID, "one sensor", registry.Backfill{})
	critical := f.Member(t, c.ID, "critical only", registry.Backfill{})
	south := f.Member(t, c.ID, "south warnings", registry.Backfill{})
	f.route(t, north, registry.MemberRouting{Sites: []string{"north"}})
	f.route(t, one, registry.MemberRouting{Sensors: []string{"rS1"}})
	f.route(t, critical, registry.MemberRouting{MinSeverity: "critical"})
	f.route(t, south, registry.MemberRouting{Sites: []string{"south"}, MinSeverity: "warning"})

	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	zero := 0
	f.create(t,
		stateChanged("r1", "rN1", 1, at),
		storage.NotificationInput{EventID: "r2", Type: "connection_lost", SensorID: "rN2", Data: &zero, At: at.Add(time.Second)},
		stateChanged("r3", "rS1", 1, at.Add(2*time.Second)),
		storage.NotificationInput{EventID: "r4", Type: "connection_lost", SensorID: "rS1", At: at.Add(3 * time.Second)},
		// A site event: its site routes it, whatever its first sensor.
		storage.NotificationInput{EventID: "r5", Type: "site_outage", SensorID: "rN1", Site: "south",
			Sensors: []string{"rN1"}, At: at.Add(4 * time.Second)},
	)
	// A failing endpoint: a warning about no sensor.
	if n := record(t, f, c.ID, at, false, false, false, false, false); n != 1 {
		t.Fatalf("recorded %d notices", n)
	}
	publish(t, f)

	for _, tc := range []struct {
		m    registry.Member
		want []string
	}{
		{all, []string{"state_changed@rN1", "connection_lost@rN2", "state_changed@rS1", "connection_lost@rS1", "site_outage@rN1", "endpoint_failing@"}},
		{north, []string{"state_changed@rN1", "connection_lost@rN2", "endpoint_failing@"}},
		{one, []string{"state_changed@rS1", "connection_lost@rS1", "endpoint_failing@"}},
		{critical, []string{"connection_lost@rN2"}},
		{south, []string{"connection_lost@rS1", "site_outage@rN1", "endpoint_failing@"}},
	} {
		if got := f.inboxKeys(t, tc.m); !slices.Equal(got, tc.want) {
			t.Errorf("%s hears %v, want %v", tc.m.Name, got, tc.want)
		}
	}

	// Back to the default: everything again.
	f.route(t, critical, registry.MemberRouting{})
	f.create(t, stateChanged("r6", "rS1", 0, at.Add(5*time.Second)))
	if got := f.inboxKeys(t, critical); len(got) != 2 || got[1] != "state_changed@rS1" {
		t.Errorf("after resetting its routing, critical-only hears %v", got)
	}
}

// A digest member with an address gets an email at once for a critical
// message (one per sensor), none for a warning; a member mailed per episode
// gets none from the fan-out (the escalation round mails it).
func TestDigestMemberGetsCriticalAtOnce(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "dgDoor")
	c := f.Client(t, registry.Client{Name: "digests"}, "dgDoor")
	digest := f.Member(t, c.ID, "digest", registry.Backfill{})
	episodic := f.Member(t, c.ID, "episodic", registry.Backfill{})
	prefs := registry.DefaultMemberPreferences()
	prefs.Email = registry.EmailDigest
	address := "d@example.com"
	if _, err := f.reg.UpdateMember(f.ctx, digest.ID, registry.MemberUpdate{Preferences: &prefs, Email: &address}); err != nil {
		t.Fatal(err)
	}
	other := "e@example.com"
	if _, err := f.reg.UpdateMember(f.ctx, episodic.ID, registry.MemberUpdate{Email: &other}); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	zero, one := 0, 1
	f.create(t, storage.NotificationInput{EventID: "w", Type: "connection_lost", SensorID: "dgDoor", Data: &one, At: at})
	f.create(t, storage.NotificationInput{EventID: "c", Type: "connection_lost", SensorID: "dgDoor", Data: &zero, At: at.Add(time.Second)})
	var targets []string
	for _, d := range f.deliveries(t, c.ID) {
		if d.NotificationID == "" {
			targets = append(targets, string(d.Channel)+":"+d.Target+":"+d.SensorID)
		}
	}
	if want := []string{"email:member:" + digest.ID + ":dgDoor"}; !slices.Equal(targets, want) {
		t.Errorf("member deliveries %v, want %v", targets, want)
	}
}
