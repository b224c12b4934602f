package storage_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// fillOutbox inserts n notifications and their PENDING webhook deliveries for
// one client, one per sensor, due now, in one statement each: the outbox a
// burst of changes leaves, before any ANALYZE.
func fillOutbox(t *testing.T, conn *pgx.Conn, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `
		INSERT INTO notifications (id, event_id, client_id, sensor_id, type, data, previous, event_at)
		SELECT lockstream_uuid_v7(), 'e' || i, '018f0000-0000-7000-8000-000000000001', 's' || i, 'state_changed', 1, 0,
		       now() - interval '1 second'
		FROM generate_series(1, $1) AS i`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `
		INSERT INTO deliveries (id, notification_id, client_id, sensor_id, event_type, channel, target, state,
		                        next_attempt_at, event_at)
		SELECT lockstream_uuid_v7(), n.id, n.client_id, n.sensor_id, n.type, 'webhook', '', 'PENDING', now(), n.event_at
		FROM notifications n`); err != nil {
		t.Fatal(err)
	}
}

// explainDue returns the plan of the claim's choice of 64 due webhook
// deliveries, executed (EXPLAIN ANALYZE) in a transaction that is rolled back:
// the body of lockstream_due_deliveries as stored, under the settings its SET
// clause gives it (EXPLAIN of the claim itself shows only a Function Scan).
func explainDue(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	ctx := context.Background()
	var (
		body   string
		config []string
	)
	if err := conn.QueryRow(ctx, `SELECT prosrc, coalesce(proconfig, '{}') FROM pg_proc WHERE proname = 'lockstream_due_deliveries'`).
		Scan(&body, &config); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, c := range config {
		name, value, _ := strings.Cut(c, "=")
		if _, err := tx.Exec(ctx, `SELECT set_config($1, $2, true)`, name, value); err != nil {
			t.Fatal(err)
		}
	}
	// The body is `BEGIN RETURN QUERY <statement>; END`.
	_, body, _ = strings.Cut(body, "RETURN QUERY")
	body, _, _ = strings.Cut(body, ";")
	body = strings.NewReplacer("due_at", "$1::timestamptz", "max_rows", "$2::int", "channels", "$3::text[]").Replace(body)
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) `+body,
		time.Now(), 64, []string{"webhook"})
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// explainClaim returns the plan of the whole claim of 64 webhook deliveries,
// executed (EXPLAIN ANALYZE) in a transaction that is rolled back.
func explainClaim(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) `+storage.ClaimDeliveriesSQL,
		time.Now(), 64, time.Minute, []string{"webhook"})
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestClaimPlanOnFreshOutbox EXPLAINs the claim's choice of due deliveries on
// an outbox just filled with 20,000 due deliveries that were never analyzed
// (as before autovacuum's first look): the plan walks the due index of each
// partition, merged in due order, and stops at the limit — no Sort of every
// due delivery, and the ordering check runs for the rows claimed only; the
// claim's update joins the chosen rows by primary key. Before migration 00120
// the same fill planned a Sort over all 20,000, each checked.
func TestClaimPlanOnFreshOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	conn, err := pgx.Connect(ctx, stores.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	fillOutbox(t, conn, 20_000)
	var analyzed bool
	if err := conn.QueryRow(ctx, `SELECT bool_or(last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)
		FROM pg_stat_user_tables WHERE relname LIKE 'deliveries%'`).Scan(&analyzed); err != nil {
		t.Fatal(err)
	}
	plan := explainDue(t, conn)
	t.Logf("the claim's choice on a fresh outbox of 20,000 due deliveries (analyzed: %v):\n%s", analyzed, plan)
	if strings.Contains(plan, "Sort (actual") || strings.Contains(plan, "->  Sort") {
		t.Errorf("the plan sorts the due deliveries instead of walking the due index")
	}
	if !strings.Contains(plan, "Merge Append") || !strings.Contains(plan, "next_attempt_at_idx") {
		t.Errorf("the plan does not merge the partitions' due indexes")
	}
	if strings.Contains(plan, "loops=20000") {
		t.Errorf("the ordering check runs for every due delivery")
	}
	whole := explainClaim(t, conn)
	t.Logf("the whole claim:\n%s", whole)
	if strings.Contains(whole, "Seq Scan") || strings.Contains(whole, "Sort (actual") {
		t.Errorf("the claim's update reads a partition or sorts instead of joining the claimed rows by key")
	}
}
