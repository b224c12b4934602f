package incident_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/incident"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// t0 is the tests' fixed time of the events that open incidents; rounds run
// at t0 plus what a test says, whatever the date of the run.
var t0 = time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)

// fixture is a test's own database and store.
type fixture struct {
	ctx   context.Context
	pg    *storage.Postgres
	reg   *registry.Store
	store *incident.PostgresStore
	count *storage.StatementCounter
	seq   int
}

func newFixture(t testing.TB, sensors ...string) *fixture {
	t.Helper()
	stores := storagetest.New(t)
	f := &fixture{ctx: context.Background(), count: &storage.StatementCounter{}}
	pg, err := storage.OpenPostgres(f.ctx, stores.PostgresURL, storage.WithSecretBox(stores.SecretBox),
		storage.WithStatementCounter(f.count))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	f.pg, f.reg, f.store = pg, registry.New(pg), incident.NewPostgresStore(pg)
	for _, id := range sensors {
		if _, err := f.reg.CreateSensor(f.ctx, registry.Sensor{ID: id, Address: "addr of " + id}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) client(t testing.TB, sensors ...string) registry.Client {
	t.Helper()
	c, err := f.reg.CreateClient(f.ctx, registry.Client{Name: "acme", WebhookURL: "https://example.com/hook",
		Secret: "whsec_c2VjcmV0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sensors {
		if err := f.reg.LinkSensor(f.ctx, c.ID, s); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (f *fixture) member(t testing.TB, clientID, name string) registry.Member {
	t.Helper()
	m := registry.Member{ClientID: clientID, Name: name, Email: name + "@example.com", Timezone: "UTC",
		Preferences: registry.DefaultMemberPreferences()}
	hash := sha256.Sum256([]byte("lsm_" + uuid.NewString()))
	created, _, err := f.reg.CreateMember(f.ctx, m, hash[:], registry.Backfill{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// event fans out one event of each sensor at t0+after, as the fan-out does.
func (f *fixture) event(t testing.TB, typ string, data int, after time.Duration, sensors ...string) {
	t.Helper()
	var events []storage.NotificationInput
	for _, s := range sensors {
		f.seq++
		d := data
		events = append(events, storage.NotificationInput{EventID: fmt.Sprintf("ev-%d-%s", f.seq, uuid.NewString()),
			Type: typ, SensorID: s, Data: &d, At: t0.Add(after)})
	}
	if _, err := fanout.NewPostgresStore(f.pg).CreateNotifications(f.ctx, events); err != nil {
		t.Fatal(err)
	}
}

// intake runs intake batches until the feeds are read.
func (f *fixture) intake(t testing.TB) incident.IntakeResult {
	t.Helper()
	var sum incident.IntakeResult
	for {
		res, err := f.store.Intake(f.ctx, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Ran {
			t.Fatal("the intake lock was held")
		}
		sum.Events += res.Events
		sum.Opened += res.Opened
		sum.Attached += res.Attached
		sum.Resolved += res.Resolved
		if !res.Full {
			return sum
		}
	}
}

func (f *fixture) policy(t testing.TB, clientID string, pol domain.EscalationPolicy) {
	t.Helper()
	if errs := pol.Check(); len(errs) > 0 {
		t.Fatalf("invalid policy: %v", errs)
	}
	if bad, err := f.store.PutPolicy(f.ctx, clientID, pol); err != nil {
		t.Fatalf("%v %v", bad, err)
	}
}

// round runs a reminder round at t0+at.
func (f *fixture) round(t testing.TB, at time.Duration) incident.RoundResult {
	t.Helper()
	res, err := f.store.RemindRound(f.ctx, incident.Round{Now: t0.Add(at), Limit: 100000,
		PublicURL: "https://lockstream.example.com", AckTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (f *fixture) incidents(t testing.TB, clientID string) []domain.Incident {
	t.Helper()
	out, err := f.store.List(f.ctx, incident.Filter{ClientID: clientID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// reminder is an incident_reminder message of a member's inbox.
type reminder struct {
	IncidentID string `json:"incident_id"`
	AckURL     string `json:"ack_url"`
	Tier       int    `json:"tier"`
}

// reminders returns the reminders in the member's inbox, oldest first.
func (f *fixture) reminders(t testing.TB, memberID string) []reminder {
	t.Helper()
	rows, err := f.pg.Pool().Query(f.ctx, `SELECT message FROM inbox_messages
		WHERE member_id = $1 AND type = $2 ORDER BY seq`, memberID, incident.ReminderType)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []reminder
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var r reminder
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func minutes(n int) domain.Duration { return domain.Duration(time.Duration(n) * time.Minute) }
