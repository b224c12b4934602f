package incident_test

import (
	"crypto/sha256"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/lockstream/lockstream/incident"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// memberWith makes a member of the client with preferences and devices.
func (f *fixture) memberWith(t testing.TB, clientID, name string, prefs registry.MemberPreferences,
	devices ...string) registry.Member {
	t.Helper()
	m := registry.Member{ClientID: clientID, Name: name, Email: name + "@example.com", Timezone: "UTC", Preferences: prefs}
	for _, d := range devices {
		m.PushTargets = append(m.PushTargets, storage.PushTarget{Platform: storage.PlatformIOS, PushKey: d})
	}
	hash := sha256.Sum256([]byte("lsm_" + uuid.NewString()))
	created, _, err := registry.New(f.pg).CreateMember(f.ctx, m, hash[:], registry.Backfill{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// TestRemindersByEmailAndPush: each reminder also goes by email and push as
// its member's preferences say — an email to once_per_unread, and to digest
// for a critical incident, none for off; a push (prototype incident.reminder)
// to each device unless push is false — and every one of them carries the
// reminder's one-click ack link, the same as its inbox message.
func TestRemindersByEmailAndPush(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	c := f.client(t, "door1")
	prefs := func(email registry.EmailPreference, push bool) registry.MemberPreferences {
		p := registry.DefaultMemberPreferences()
		p.Email, p.Push = email, push
		return p
	}
	alice := f.memberWith(t, c.ID, "alice", prefs(registry.EmailOncePerUnread, true), "dev-a1", "dev-a2")
	bob := f.memberWith(t, c.ID, "bob", prefs(registry.EmailDigest, false), "dev-b")
	carol := f.memberWith(t, c.ID, "carol", prefs(registry.EmailOff, true), "dev-c")
	f.event(t, "connection_lost", 0, 0, "door1") // critical: the default policy, every member
	f.intake(t)
	if res := f.round(t, 0); res.Reminders != 3 {
		t.Fatalf("round %+v, want 3 reminders", res)
	}
	// The reminders bring their own email and push: they open no escalation
	// episode (the loss's message opened its sensor's, one per member).
	var reminderEpisodes, sensorEpisodes int
	if err := f.pg.Pool().QueryRow(f.ctx, `SELECT count(*) FILTER (WHERE key = '#' || $1), count(*) FILTER (WHERE key = 'door1')
		FROM escalation_episodes`, incident.ReminderType).Scan(&reminderEpisodes, &sensorEpisodes); err != nil {
		t.Fatal(err)
	}
	if reminderEpisodes != 0 || sensorEpisodes != 3 {
		t.Errorf("escalation episodes: %d of reminders (want 0), %d of door1 (want 3)", reminderEpisodes, sensorEpisodes)
	}

	rows, err := f.pg.Pool().Query(f.ctx, `SELECT d.id::text, d.channel, d.target, me.member_id::text, me.kind
		FROM deliveries d JOIN member_emails me ON me.delivery_id = d.id AND me.event_at = d.event_at
		WHERE d.event_type = $1 ORDER BY d.channel, d.target`, incident.ReminderType)
	if err != nil {
		t.Fatal(err)
	}
	type delivery struct{ id, channel, target, member, kind string }
	var got []delivery
	for rows.Next() {
		var d delivery
		if err := rows.Scan(&d.id, &d.channel, &d.target, &d.member, &d.kind); err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	rows.Close()
	want := []delivery{
		{channel: "email", target: "member:" + alice.ID, member: alice.ID, kind: "message"},
		{channel: "email", target: "member:" + bob.ID, member: bob.ID, kind: "message"},
		{channel: "swrve", target: "IOS:dev-a1", member: alice.ID, kind: "push"},
		{channel: "swrve", target: "IOS:dev-a2", member: alice.ID, kind: "push"},
		{channel: "swrve", target: "IOS:dev-c", member: carol.ID, kind: "push"},
	}
	if len(got) != len(want) {
		t.Fatalf("deliveries %+v, want %+v", got, want)
	}
	var ids []string
	for i, w := range want {
		if g := got[i]; g.channel != w.channel || g.target != w.target || g.member != w.member || g.kind != w.kind {
			t.Fatalf("delivery %d: %+v, want %+v", i, g, w)
		}
		ids = append(ids, got[i].id)
	}
	links := map[string]string{} // member → the ack link of its reminder
	for _, m := range []registry.Member{alice, bob, carol} {
		r := f.reminders(t, m.ID)
		if len(r) != 1 || !strings.HasPrefix(r[0].AckURL, "https://lockstream.example.com/ack/") {
			t.Fatalf("%s's reminders %+v", m.Name, r)
		}
		links[m.ID] = r[0].AckURL
	}

	emails, err := f.pg.MemberEmails(f.ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range got[:2] {
		e := emails[d.id]
		var body struct {
			AckURL string `json:"ack_url"`
		}
		if len(e.Messages) != 1 || e.Messages[0].Type != incident.ReminderType ||
			json.Unmarshal(e.Messages[0].Message, &body) != nil || body.AckURL != links[d.member] {
			t.Fatalf("email %s lists %+v, want the reminder with link %s", d.id, e.Messages, links[d.member])
		}
	}
	pushes, err := f.pg.PushRequests(f.ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range got[2:] {
		p := pushes[d.id]
		var body struct {
			AckURL string `json:"ack_url"`
		}
		if p.MessagePrototypeKey != incident.PushPrototype || json.Unmarshal([]byte(p.Message), &body) != nil ||
			body.AckURL != links[d.member] {
			t.Fatalf("push %s: %+v, want prototype %s and link %s", d.id, p, incident.PushPrototype, links[d.member])
		}
	}
}
