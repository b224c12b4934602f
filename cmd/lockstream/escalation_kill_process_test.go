package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
)

// escalationCounts counts the client's escalations by episode ("<channel>
// <target> <episode key>"): a round's email or push (one per member and
// device) names its member and the range of first_seq of the episodes it
// escalates, expanded here into those episodes.
func escalationCounts(t *testing.T, ctx context.Context, pg *storage.Postgres, clientID string) map[string]int {
	t.Helper()
	rows, err := pg.Pool().Query(ctx, `
		SELECT d.channel || ' ' || d.target || ' ' || e.key, count(*)
		FROM deliveries d
		JOIN member_emails me ON me.delivery_id = d.id AND me.event_at = d.event_at AND me.kind IN ('round', 'push')
		JOIN escalation_episodes e ON e.member_id = me.member_id AND e.first_seq > me.from_seq AND e.first_seq <= me.to_seq
		WHERE d.client_id = $1 AND d.event_type = 'unseen'
		GROUP BY 1`, clientID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var (
			k string
			n int
		)
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEscalationSurvivesSIGKILL kills two `lockstream escalation` processes
// with SIGKILL at random moments of their rounds (700 episodes each) over
// 10,000 due episodes, three times, then lets one finish: every episode is escalated exactly once
// (listed by one email and one push of its member's), none twice, none lost.
func TestEscalationSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	const members, sensors = 100, 100
	ctx := context.Background()
	stores := storagetest.New(t)
	pg := stores.Postgres
	ids := make([]string, sensors)
	for i := range ids {
		ids[i] = fmt.Sprintf("killEsc%03d", i)
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
	for i := range members {
		hash := sha256.Sum256([]byte(uuid.NewString()))
		name := fmt.Sprintf("m%03d", i)
		if _, _, err := registry.New(pg).CreateMember(ctx, registry.Member{ClientID: c.ID, Name: name, Email: name + "@example.com",
			Timezone: "UTC", Preferences: registry.DefaultMemberPreferences(),
			PushTargets: []storage.PushTarget{{Platform: storage.PlatformIOS, PushKey: "dev-" + name}}},
			hash[:], registry.Backfill{}); err != nil {
			t.Fatal(err)
		}
	}
	var events []storage.NotificationInput
	for i, s := range ids {
		events = append(events, storage.NotificationInput{EventID: fmt.Sprintf("kill-%d", i), Type: "state_changed",
			SensorID: s, Data: new(1), At: time.Now()})
	}
	if _, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, events); err != nil {
		t.Fatal(err)
	}

	h := newHarness(t, append(storeSettings(stream.Config{}, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL,
		stores.RedisPrefix), "LOCKSTREAM_ESCALATION_INTERVAL=50ms", "LOCKSTREAM_ESCALATE_EMAIL_AFTER=1s",
		"LOCKSTREAM_ESCALATE_PUSH_AFTER=1s",
		"LOCKSTREAM_ESCALATION_LIMIT=700")...) // rounds of 700 episodes: kills land between and inside them
	rng := rand.New(rand.NewPCG(12, 12))
	for k := range 3 {
		a, b := h.start(fmt.Sprintf("escalation-%da", k), "escalation"), h.start(fmt.Sprintf("escalation-%db", k), "escalation")
		h.waitFor("both escalation processes running rounds", func() (bool, string) {
			return strings.Contains(a.out.String(), "escalation started") && strings.Contains(b.out.String(), "escalation started"), ""
		})
		time.Sleep(time.Duration(rng.IntN(1200)) * time.Millisecond) // a random moment of the rounds
		a.kill()
		b.kill()
		n := 0
		for _, v := range escalationCounts(t, ctx, pg, c.ID) {
			n += v
		}
		t.Logf("kill %d: %d (channel, episode) escalations committed", k+1, n)
	}
	h.start("escalation-last", "escalation")
	var got map[string]int
	h.waitFor("every episode escalated", func() (bool, string) {
		got = escalationCounts(t, ctx, pg, c.ID)
		return len(got) == 2*members*sensors, fmt.Sprintf("%d of %d (email, push) × episode", len(got), 2*members*sensors)
	})
	for k, n := range got {
		if n != 1 {
			t.Errorf("%s: escalated %d times", k, n)
		}
	}
}
