package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/escalation"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// escalationSensors is the number of sensors of BenchmarkEscalationRound: each
// member has one due episode per sensor.
const escalationSensors = 10

// BenchmarkEscalationRound times one escalation round over 100,000 due
// episodes across 10,000 members, and over 10,000 across 1,000 (10 sensors of
// one client flipped once: the fan-out's real inbox write opens the episodes),
// every member with an address and a device and the default preferences: the
// round sends each member one email and one push listing its 10 episodes, so
// it inserts 10,000 email and 10,000 push deliveries (each with its
// member_emails row) and moves 10,000 members' cursors, in one transaction. Those rounds have a limit of every due
// episode (the figure: one round over all of them). The last
// sub-benchmark runs rounds with the daemon's default limit
// (escalation.DefaultLimit, 20,000) over the same 100,000 until all are
// handled (the daemon runs them back to back, a full round being followed by
// another at once) and reports the first round and the whole backlog.
// It reports durations and the statements of a round (counted by a pgx
// tracer). Seeding (members in one statement, the flips through
// CreateNotifications, then VACUUM ANALYZE) is not timed.
//
//	go test -run '^$' -bench EscalationRound -benchtime 1x -timeout 30m ./bench/
func BenchmarkEscalationRound(b *testing.B) {
	for _, members := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("episodes=%d", members*escalationSensors), func(b *testing.B) {
			benchEscalationRound(b, members, members*escalationSensors)
		})
	}
	b.Run(fmt.Sprintf("episodes=%d/limit=%d", 10_000*escalationSensors, escalation.DefaultLimit), func(b *testing.B) {
		benchEscalationRound(b, 10_000, escalation.DefaultLimit)
	})
}

// benchEscalationRound seeds members × escalationSensors due episodes and runs
// rounds of the limit until every one is handled.
func benchEscalationRound(b *testing.B, members, limit int) {
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
		seedEscalation(ctx, b, stores.PostgresURL, pg, members)
		now := time.Now().Add(time.Hour)
		var total escalation.Result
		var first, all time.Duration
		rounds, want := 0, members*escalationSensors
		for {
			before := count.Count()
			b.StartTimer()
			start := time.Now()
			res, err := escalation.NewPostgresStore(pg).RunRound(ctx, escalation.Round{Now: now,
				EmailAfter: 15 * time.Minute, PushAfter: 2 * time.Minute, Limit: limit})
			took := time.Since(start)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if statements := count.Count() - before; statements != int64(res.Statements) {
				b.Fatalf("round %d: %d statements on the wire, the round reports %d", rounds+1, statements, res.Statements)
			}
			if rounds == 0 {
				first = took
				b.ReportMetric(took.Seconds(), "s/round")
				b.ReportMetric(float64(res.Statements), "statements/round")
				b.Logf("first round: %d due episodes of %d members → %d emails, %d pushes in %v, %d statements",
					res.Episodes, members, res.Emails, res.Pushes, took.Round(time.Millisecond), res.Statements)
			}
			rounds++
			all += took
			total.Episodes, total.Emails, total.Pushes = total.Episodes+res.Episodes, total.Emails+res.Emails, total.Pushes+res.Pushes
			if res.Episodes == 0 || total.Episodes >= want {
				break
			}
		}
		// One email and one push per member per round.
		if total.Episodes != want || total.Emails < members || total.Pushes < members ||
			(rounds == 1 && (total.Emails != members || total.Pushes != members)) {
			b.Fatalf("rounds: %+v, want %d episodes and an email and a push per member and round", total, want)
		}
		if rounds > 1 {
			b.ReportMetric(all.Seconds(), "s/backlog")
			b.ReportMetric(float64(rounds), "rounds/backlog")
			b.Logf("backlog of %d episodes cleared in %d rounds of at most %d: %v (first %v)", want, rounds, limit,
				all.Round(time.Millisecond), first.Round(time.Millisecond))
		}
		pg.Close()
		b.StartTimer()
	}
}

// seedEscalation makes the due episodes of BenchmarkEscalationRound.
func seedEscalation(ctx context.Context, b *testing.B, pgURL string, pg *storage.Postgres, members int) {
	b.Helper()
	start := time.Now()
	sensors := make([]string, escalationSensors)
	for i := range sensors {
		sensors[i] = fmt.Sprintf("escBench%d", i)
	}
	if err := registry.New(pg).CreateSensors(ctx, sensors, "bench street"); err != nil {
		b.Fatal(err)
	}
	client, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "bench", WebhookURL: "https://example.com/h", Secret: "whsec_x"})
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range sensors {
		if err := registry.New(pg).LinkSensor(ctx, client.ID, s); err != nil {
			b.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `
		WITH m AS (
			INSERT INTO members (id, client_id, name, email, timezone, preferences, token_hash)
			SELECT md5(i::text)::uuid, $1, 'member ' || i, 'm' || i || '@example.com', 'UTC',
			       '{"email":"once_per_unread","push":true,"digest_times":["09:00","17:00"]}',
			       sha256(convert_to('lsm_esc' || i, 'UTF8'))
			FROM generate_series(0, $2 - 1) AS i
			RETURNING id
		), t AS (
			INSERT INTO member_push_targets (member_id, platform, push_key) SELECT id, 'IOS', 'dev-' || id FROM m
		)
		INSERT INTO member_inbox (member_id, epoch) SELECT id, 'bench' FROM m`, client.ID, members); err != nil {
		b.Fatalf("seeding members: %v", err)
	}
	var events []storage.NotificationInput
	for i, s := range sensors {
		events = append(events, storage.NotificationInput{EventID: fmt.Sprintf("esc-bench-%d", i), Type: "state_changed",
			SensorID: s, Data: new(1), At: time.Now()})
	}
	if _, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, events); err != nil {
		b.Fatal(err)
	}
	for _, table := range []string{"inbox_messages", "escalation_episodes", "members", "member_push_targets", "deliveries"} {
		if _, err := conn.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("seeded %d members and %d due episodes in %v", members, members*escalationSensors,
		time.Since(start).Round(time.Second))
}
