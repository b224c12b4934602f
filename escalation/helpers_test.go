package escalation_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/escalation"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// fixture is a test's own database with sensors and a way to run rounds at any
// time.
type fixture struct {
	ctx   context.Context
	pg    *storage.Postgres
	reg   *registry.Store
	count *storage.StatementCounter
	start time.Time // before anything was written: episodes open after it
	seq   int
}

func newFixture(t *testing.T, sensors ...string) *fixture {
	t.Helper()
	stores := storagetest.New(t)
	f := &fixture{ctx: context.Background(), count: &storage.StatementCounter{}, start: time.Now()}
	pg, err := storage.OpenPostgres(f.ctx, stores.PostgresURL, storage.WithSecretBox(stores.SecretBox),
		storage.WithStatementCounter(f.count))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	f.pg, f.reg = pg, registry.New(pg)
	for _, id := range sensors {
		if _, err := f.reg.CreateSensor(f.ctx, registry.Sensor{ID: id, Address: "addr of " + id}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) client(t *testing.T, sensors ...string) registry.Client {
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

// member creates a member with an address and a device; change adjusts it.
func (f *fixture) member(t *testing.T, clientID, name string, change func(*registry.Member)) registry.Member {
	t.Helper()
	m := registry.Member{ClientID: clientID, Name: name, Email: name + "@example.com", Timezone: "UTC",
		Preferences: registry.DefaultMemberPreferences(),
		PushTargets: []storage.PushTarget{{Platform: storage.PlatformIOS, PushKey: "dev-" + name}}}
	if change != nil {
		change(&m)
	}
	hash := sha256.Sum256([]byte("lsm_" + uuid.NewString()))
	created, _, err := f.reg.CreateMember(f.ctx, m, hash[:], registry.Backfill{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// flip fans out one state change of each sensor.
func (f *fixture) flip(t *testing.T, typ string, data int, sensors ...string) {
	t.Helper()
	var events []storage.NotificationInput
	for _, s := range sensors {
		f.seq++
		d := data
		events = append(events, storage.NotificationInput{EventID: fmt.Sprintf("ev-%d", f.seq), Type: typ,
			SensorID: s, Data: &d, At: time.Now()})
	}
	if _, err := fanout.NewPostgresStore(f.pg).CreateNotifications(f.ctx, events); err != nil {
		t.Fatal(err)
	}
}

// escalator returns an escalator whose clock reads now() when asked.
func (f *fixture) escalator(t *testing.T, now *time.Time) *escalation.Escalator {
	t.Helper()
	e, err := escalation.New(escalation.Config{Now: func() time.Time { return *now }}, escalation.NewPostgresStore(f.pg),
		prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (f *fixture) round(t *testing.T, e *escalation.Escalator) escalation.Result {
	t.Helper()
	res, err := e.RunRound(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Ran {
		t.Fatal("the round did not run: the lock was held")
	}
	return res
}

// escalations returns the client's escalation deliveries (no notification).
func (f *fixture) escalations(t *testing.T, clientID string) []storage.Delivery {
	t.Helper()
	ds, err := f.pg.ListClientDeliveries(f.ctx, clientID, storage.DeliveryFilter{}, storage.Page{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	var out []storage.Delivery
	for _, d := range ds {
		if d.NotificationID == "" {
			out = append(out, d)
		}
	}
	return out
}

// byTarget counts deliveries by target ("member:<id>" for email, the device for
// a push) and kind.
func byTarget(ds []storage.Delivery) map[string]int {
	out := map[string]int{}
	for _, d := range ds {
		out[d.EventType+" "+d.Target]++
	}
	return out
}

func (f *fixture) markAll(t *testing.T, memberID string, action inbox.Action) {
	t.Helper()
	if _, err := inbox.NewPostgresStore(f.pg).MarkInbox(f.ctx, memberID, action, nil, true); err != nil {
		t.Fatal(err)
	}
}

// escalatedSQL expands a client's round deliveries into the episodes they
// escalate: "<channel> <target> <episode key>" and how many deliveries
// escalated that episode on that channel and target (a round's email or push
// names its member and the range of first_seq of its episodes).
const escalatedSQL = `
	SELECT d.channel || ' ' || d.target || ' ' || e.key, count(*)
	FROM deliveries d
	JOIN member_emails me ON me.delivery_id = d.id AND me.event_at = d.event_at AND me.kind IN ('round', 'push')
	JOIN escalation_episodes e ON e.member_id = me.member_id AND e.first_seq > me.from_seq AND e.first_seq <= me.to_seq
	WHERE d.client_id = $1
	GROUP BY 1`

// escalated returns escalatedSQL's counts.
func (f *fixture) escalated(t *testing.T, clientID string) map[string]int {
	t.Helper()
	rows, err := f.pg.Pool().Query(f.ctx, escalatedSQL, clientID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (kv struct {
		k string
		n int
	}, err error) {
		err = r.Scan(&kv.k, &kv.n)
		return kv, err
	})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, kv := range out {
		m[kv.k] = kv.n
	}
	return m
}
