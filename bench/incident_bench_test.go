package bench

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/incident"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// incidentMembers is the number of members of BenchmarkIncidentRound's client:
// each incident's one tier names one of them.
const incidentMembers = 10_000

// BenchmarkIncidentRound times reminder rounds (incident.PostgresStore's
// RemindRound, the statement the escalation command runs every
// LOCKSTREAM_ESCALATION_INTERVAL) over 100,000 open incidents of one client
// with 10,000 members, each incident with one tier naming one member:
//
//   - due=100000: every incident is due, one round with a limit of all of
//     them (100,000 reminders: inbox messages, ack tokens, timeline entries,
//     tier rows moved on);
//   - due=100000/limit=20000: the same with the daemon's limit, rounds back to
//     back until none is due;
//   - due=1000: 1,000 of the 100,000 are due (the usual case: a round costs
//     what is due, found by the partial index on next_at).
//
// It reports the first round's duration and its statements, counted on the
// wire by a pgx tracer (they must equal the round's own count: 3). Seeding
// (one SQL statement per table, then VACUUM ANALYZE) is not timed.
//
//	go test -run '^$' -bench IncidentRound -benchtime 1x -timeout 30m ./bench/
func BenchmarkIncidentRound(b *testing.B) {
	for _, c := range []struct {
		name       string
		due, limit int
	}{
		{"open=100000/due=100000", 100_000, 100_000},
		{"open=100000/due=100000/limit=20000", 100_000, incident.DefaultLimit},
		{"open=100000/due=1000", 1_000, 100_000},
	} {
		b.Run(c.name, func(b *testing.B) { benchIncidentRound(b, 100_000, c.due, c.limit) })
	}
}

func benchIncidentRound(b *testing.B, open, due, limit int) {
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		stores := storagetest.New(b)
		count := &storage.StatementCounter{}
		pg, err := storage.OpenPostgres(ctx, stores.PostgresURL, storage.WithSecretBox(stores.SecretBox),
			storage.WithStatementCounter(count))
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		seedIncidents(ctx, b, stores.PostgresURL, pg, open, due, now)
		store := incident.NewPostgresStore(pg)
		var all time.Duration
		reminders, rounds := 0, 0
		for {
			before := count.Count()
			b.StartTimer()
			start := time.Now()
			res, err := store.RemindRound(ctx, incident.Round{Now: now, Limit: limit, PublicURL: "https://ls.example.com",
				AckTTL: time.Hour})
			took := time.Since(start)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if statements := count.Count() - before; statements != int64(res.Statements) {
				b.Fatalf("%d statements on the wire, the round reports %d", statements, res.Statements)
			}
			if rounds == 0 {
				b.ReportMetric(took.Seconds(), "s/round")
				b.ReportMetric(float64(res.Statements), "statements/round")
				b.Logf("first round: %d due tiers of %d open incidents → %d reminders in %v, %d statements",
					res.Tiers, open, res.Reminders, took.Round(time.Millisecond), res.Statements)
			}
			rounds++
			all += took
			reminders += res.Reminders
			if !res.Full {
				break
			}
		}
		if reminders != due {
			b.Fatalf("%d reminders, want %d", reminders, due)
		}
		if rounds > 1 {
			b.ReportMetric(all.Seconds(), "s/backlog")
			b.Logf("%d due cleared in %d rounds of at most %d: %v", due, rounds, limit, all.Round(time.Millisecond))
		}
		pg.Close()
		b.StartTimer()
	}
}

// seedIncidents makes open incidents of one client, each with one tier naming
// one of incidentMembers members, the first due of them due at now and the
// others in an hour.
func seedIncidents(ctx context.Context, b *testing.B, pgURL string, pg *storage.Postgres, open, due int, now time.Time) {
	b.Helper()
	start := time.Now()
	client, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "bench", WebhookURL: "https://example.com/h", Secret: "whsec_x"})
	if err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{`
		WITH m AS (
			INSERT INTO members (id, client_id, name, email, timezone, preferences, token_hash)
			SELECT md5('m' || i)::uuid, $1, 'member ' || i, 'm' || i || '@example.com', 'UTC',
			       '{"email":"once_per_unread","push":true,"digest_times":["09:00","17:00"]}',
			       sha256(convert_to('lsm_inc' || i, 'UTF8'))
			FROM generate_series(0, $2 - 1) AS i
			RETURNING id
		)
		INSERT INTO member_inbox (member_id, epoch) SELECT id, 'bench' FROM m
		WHERE $3::int >= 0 AND $4::int >= 0 AND $5::timestamptz IS NOT NULL`, `
		INSERT INTO incidents (id, client_id, subject, sensor_id, state, severity, type, event_id, opened_seq,
		                       opened_at, last_event_at)
		SELECT md5('i' || i)::uuid, $1, 'sensor:s' || i, 's' || i, 'open', 'critical', 'connection_lost', 'ev' || i, i,
		       $5::timestamptz - interval '1 hour', $5::timestamptz - interval '1 hour'
		FROM generate_series(0, $3 - 1) AS i
		WHERE $2::int >= 0 AND $4::int >= 0`, `
		INSERT INTO incident_tiers (incident_id, tier, members, next_at, repeat_every, stop_at)
		SELECT md5('i' || i)::uuid, 1, ARRAY[md5('m' || (i % $2))::uuid],
		       CASE WHEN i < $4 THEN $5::timestamptz ELSE $5::timestamptz + interval '1 hour' END,
		       interval '5 minutes', $5::timestamptz + interval '1 day'
		FROM generate_series(0, $3 - 1) AS i
		WHERE $1::uuid IS NOT NULL`,
	} {
		if _, err := conn.Exec(ctx, q, client.ID, incidentMembers, open, due, now); err != nil {
			b.Fatalf("seeding incidents: %v", err)
		}
	}
	for _, table := range []string{"members", "member_inbox", "incidents", "incident_tiers"} {
		if _, err := conn.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("seeded %d members and %d open incidents (%d due) in %v", incidentMembers, open, due,
		time.Since(start).Round(time.Second))
}
