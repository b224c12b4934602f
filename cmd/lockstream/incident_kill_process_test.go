package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/incident"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
)

// reminderCounts counts the client's incident reminders by "<member>
// <incident> <due time in µs>", read from the inboxes.
func reminderCounts(t *testing.T, ctx context.Context, pg *storage.Postgres, clientID string) map[string]int {
	t.Helper()
	rows, err := pg.Pool().Query(ctx, `SELECT member_id::text, message FROM inbox_messages
		WHERE client_id = $1 AND type = $2`, clientID, incident.ReminderType)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var (
			member string
			raw    []byte
			r      incidentReminder
		)
		if err := rows.Scan(&member, &raw); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("%s %s %d", member, r.IncidentID, r.DueAt.UnixMicro())]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestIncidentRemindersSurviveSIGKILL kills two `lockstream escalation`
// processes with SIGKILL at random moments of their reminder rounds and sends
// (sends of 3 incidents each: kills land between and inside them), three
// times, then lets one finish: every member of every tier is reminded of every
// incident exactly once for each due time of its schedule — none twice, none
// skipped. A send whose reminders committed apart from its mark's move (or a
// round whose cursor moved apart from its mark) would double or lose some.
func TestIncidentRemindersSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	const members, sensors, loops = 12, 60, 20
	repeat, after2 := time.Second, 2500*time.Millisecond
	ctx := context.Background()
	stores := storagetest.New(t)
	pg := stores.Postgres
	ids := make([]string, sensors)
	for i := range ids {
		ids[i] = fmt.Sprintf("killInc%03d", i)
	}
	if err := registry.New(pg).CreateSensors(ctx, ids, "somewhere"); err != nil {
		t.Fatal(err)
	}
	c, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "kill", WebhookURL: "https://example.com/hook", Secret: "whsec_c2VjcmV0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ids {
		if err := registry.New(pg).LinkSensor(ctx, c.ID, s); err != nil {
			t.Fatal(err)
		}
	}
	var all, second []string
	for i := range members {
		hash := sha256.Sum256([]byte(uuid.NewString()))
		name := fmt.Sprintf("m%03d", i)
		m, _, err := registry.New(pg).CreateMember(ctx, registry.Member{ClientID: c.ID, Name: name, Email: name + "@example.com",
			Timezone: "UTC", Preferences: registry.DefaultMemberPreferences()}, hash[:], registry.Backfill{})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, m.ID)
		if i%3 == 0 {
			second = append(second, m.ID)
		}
	}
	// Tier 1: everyone at opening + 0, 1, 2… s; tier 2: a third of them at
	// opening + 2.5, 3.5… s; both until opening + 2.5 + (loops-1) s.
	pol := domain.EscalationPolicy{Severities: []string{"critical"}, RepeatEvery: domain.Duration(repeat), Loops: loops,
		Tiers: []domain.EscalationTier{{After: 0}, {After: domain.Duration(after2), Members: second}}}
	if bad, err := incident.NewPostgresStore(pg).PutPolicy(ctx, c.ID, pol); err != nil || len(bad) > 0 {
		t.Fatalf("policy: %v %v", bad, err)
	}
	var events []storage.NotificationInput
	for i, s := range ids {
		events = append(events, storage.NotificationInput{EventID: fmt.Sprintf("killinc-%d", i), Type: "connection_lost",
			SensorID: s, Data: new(0), At: time.Now()})
	}
	if _, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, events); err != nil {
		t.Fatal(err)
	}

	h := newHarness(t, append(storeSettings(stream.Config{}, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL,
		stores.RedisPrefix), "LOCKSTREAM_ESCALATION_INTERVAL=50ms", "LOCKSTREAM_INCIDENT_LIMIT=3")...)
	rng := rand.New(rand.NewPCG(23, 23))
	for k := range 3 {
		a, b := h.start(fmt.Sprintf("escalation-%da", k), "escalation"), h.start(fmt.Sprintf("escalation-%db", k), "escalation")
		h.waitFor("both processes running incident rounds", func() (bool, string) {
			return strings.Contains(a.out.String(), "incidents started") && strings.Contains(b.out.String(), "incidents started"), ""
		})
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond) // a random moment of the rounds
		a.kill()
		b.kill()
		n := 0
		for _, v := range reminderCounts(t, ctx, pg, c.ID) {
			n += v
		}
		t.Logf("kill %d: %d reminders committed", k+1, n)
	}

	want := expectedReminders(t, ctx, pg, c.ID, pol, all, second)
	h.start("escalation-last", "escalation")
	var got map[string]int
	h.waitFor("every reminder of every schedule sent", func() (bool, string) {
		got = reminderCounts(t, ctx, pg, c.ID)
		var pending int
		if err := pg.Pool().QueryRow(ctx, `SELECT count(*) FROM incident_reminder_marks`).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		return len(got) >= len(want) && pending == 0, fmt.Sprintf("%d of %d (member, incident, due time), %d marks pending",
			len(got), len(want), pending)
	})
	for k, n := range got {
		if n != 1 {
			t.Errorf("%s: reminded %d times", k, n)
		}
		if !want[k] {
			t.Errorf("%s: reminded of no due time of its schedule", k)
		}
	}
	for k := range want {
		if got[k] == 0 {
			t.Errorf("%s: never reminded", k)
		}
	}
}

// expectedReminders is every (member, incident, due time) of the client's
// incidents' schedules under pol: tier 1 every member, tier 2 second.
func expectedReminders(t *testing.T, ctx context.Context, pg *storage.Postgres, clientID string,
	pol domain.EscalationPolicy, all, second []string) map[string]bool {
	t.Helper()
	rows, err := pg.Pool().Query(ctx, `SELECT id::text, opened_at FROM incidents WHERE client_id = $1`, clientID)
	if err != nil {
		t.Fatal(err)
	}
	type opened struct {
		id string
		at time.Time
	}
	var incs []opened
	for rows.Next() {
		var o opened
		if err := rows.Scan(&o.id, &o.at); err != nil {
			t.Fatal(err)
		}
		incs = append(incs, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(incs) == 0 {
		t.Fatal("no incident opened before the kills")
	}
	repeat := time.Duration(pol.RepeatEvery)
	want := map[string]bool{}
	for _, inc := range incs {
		stop := inc.at.Add(time.Duration(pol.Tiers[1].After) + time.Duration(pol.Loops-1)*repeat)
		for tier, members := range [][]string{all, second} {
			for due := inc.at.Add(time.Duration(pol.Tiers[tier].After)); !due.After(stop); due = due.Add(repeat) {
				for _, m := range members {
					want[fmt.Sprintf("%s %s %d", m, inc.id, due.UnixMicro())] = true
				}
			}
		}
	}
	return want
}
