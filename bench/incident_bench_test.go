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

// BenchmarkIncidentRound times reminder rounds over 100,000 open incidents
// of one client with 10,000 members, each incident with one tier naming one
// member, in the steady state: the cursor stood 10 s back, every tier was
// written an hour ago, the due ones were first reminded 5 minutes ago and are
// due again now (repeat 5 minutes), the others 2 minutes ago (none due now,
// but every one of them a candidate the sender must judge).
//
//   - the round: incident.PostgresStore's MarkRound, what the escalation
//     command runs every LOCKSTREAM_ESCALATION_INTERVAL (one statement: the
//     cursor moved, the window marked, expired tiers retired);
//   - the sends: SendMarks until the mark is sent, each statement reminding up
//     to limit incidents (inbox messages, ack tokens, timeline entries).
//
// Cases: due=100000 with one send of all (limit 100,000) and with the
// daemon's limit (5,000); due=1000 (the usual case). It reports the round's
// duration and statements, counted on the wire by a pgx tracer (they must
// equal the round's own count), and the sends' total. Seeding (one SQL
// statement per table, then VACUUM ANALYZE) is not timed.
//
//	go test -run '^$' -bench IncidentRound -benchtime 1x -timeout 30m ./bench/
func BenchmarkIncidentRound(b *testing.B) {
	for _, c := range []struct {
		name       string
		due, limit int
	}{
		{"open=100000/due=100000/limit=100000", 100_000, 100_000},
		{"open=100000/due=100000/limit=5000", 100_000, incident.DefaultLimit},
		{"open=100000/due=1000", 1_000, incident.DefaultLimit},
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
		before := count.Count()
		b.StartTimer()
		start := time.Now()
		mark, err := store.MarkRound(ctx, now)
		took := time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if !mark.Marked {
			b.Fatal("the round marked nothing")
		}
		if statements := count.Count() - before; statements != int64(mark.Statements) {
			b.Fatalf("%d statements on the wire, the round reports %d", statements, mark.Statements)
		}
		b.ReportMetric(took.Seconds(), "s/round")
		b.ReportMetric(float64(mark.Statements), "statements/round")
		var sending time.Duration
		reminders, sends, first := 0, 0, time.Duration(0)
		for {
			before := count.Count()
			b.StartTimer()
			start := time.Now()
			res, err := store.SendMarks(ctx, incident.Round{Now: now, Limit: limit, PublicURL: "https://ls.example.com",
				AckTTL: time.Hour})
			took := time.Since(start)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if statements := count.Count() - before; statements != int64(res.Statements) {
				b.Fatalf("%d statements on the wire, the send reports %d", statements, res.Statements)
			}
			if res.Marks == 0 {
				break
			}
			if sends == 0 {
				first = took
			}
			sends++
			sending += took
			reminders += res.Reminders
		}
		if reminders != due {
			b.Fatalf("%d reminders, want %d", reminders, due)
		}
		b.ReportMetric(sending.Seconds(), "s/sends")
		b.ReportMetric(float64(sends), "sends")
		b.Logf("round (mark) of %d open incidents, %d due: %v, %d statement(s); sent in %d statements of 4 "+
			"(limit %d incidents, first %v): %d reminders in %v", open, due, took.Round(time.Millisecond),
			mark.Statements, sends, limit, first.Round(time.Millisecond), reminders, sending.Round(time.Millisecond))
		pg.Close()
		b.StartTimer()
	}
}

// seedIncidents makes open incidents of one client, each with one tier naming
// one of incidentMembers members, written an hour ago, repeating every 5
// minutes: the first due of them first reminded 5 minutes ago (due again at
// now), the others 2 minutes ago; the reminder cursor stood 10 s before now.
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
		INSERT INTO incident_tiers (incident_id, tier, members, next_at, repeat_every, stop_at, since)
		SELECT md5('i' || i)::uuid, 1, ARRAY[md5('m' || (i % $2))::uuid],
		       $5::timestamptz - CASE WHEN i < $4 THEN interval '5 minutes' ELSE interval '2 minutes' END,
		       interval '5 minutes', $5::timestamptz + interval '1 day', $5::timestamptz - interval '1 hour'
		FROM generate_series(0, $3 - 1) AS i
		WHERE $1::uuid IS NOT NULL`, `
		UPDATE incident_reminder_cursor SET from_at = $5::timestamptz - interval '20 seconds',
		                                    to_at = $5::timestamptz - interval '10 seconds'
		WHERE $1::uuid IS NOT NULL AND $2::int >= 0 AND $3::int >= 0 AND $4::int >= 0`,
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
