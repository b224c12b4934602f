package storage_test

import (
	"context"
	"regexp"
	"slices"
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

// runRolledBack runs sql with args twice, each time in a transaction rolled
// back: once under EXPLAIN (ANALYZE, VERBOSE), whose plan it returns, and once
// for its rows (id, channel, state, frees), whose states it returns by id.
func runRolledBack(t *testing.T, conn *pgx.Conn, sql string, args ...any) (string, map[string]string) {
	t.Helper()
	ctx := context.Background()
	query := func(sql string, scan func(pgx.Rows) error) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				t.Fatal(err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	var lines []string
	query(`EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF) `+sql, func(rows pgx.Rows) error {
		var line string
		err := rows.Scan(&line)
		lines = append(lines, line)
		return err
	})
	states := map[string]string{}
	query(sql, func(rows pgx.Rows) error {
		var id, channel, state string
		var frees bool
		err := rows.Scan(&id, &channel, &state, &frees)
		states[id] = state
		return err
	})
	return strings.Join(lines, "\n"), states
}

// newerProbe matches a probe of the open deliveries' index for a newer state
// than the row of the outer alias it captures.
var newerProbe = regexp.MustCompile(`Index Cond: \(.*\(o_\d+\.event_at > ([a-z])\w*\.event_at\)\)`)

// TestSupersededCheckPlanIsInlined runs the outcome write and the lease sweep
// over deliveries and webhooks handed over in flight, some with a newer state
// waiting: the question "does a newer open state wait behind this one"
// (lockstream_newer_open_states, migration 00242) is inlined by the planner
// into a probe of the open deliveries' index, in each of the four places that
// ask it, not called as a function per row; and it answers it.
func TestSupersededCheckPlanIsInlined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	conn, err := pgx.Connect(ctx, stores.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	fillOutbox(t, conn, 2_000)
	// newer says, by id, whether a newer state waits: s1..s100's deliveries
	// are in flight, s1..s50 with a newer state waiting; webhooks handed over
	// for s101..s150, older than the deliveries waiting there, and for
	// s2001..s2025, which have none.
	newer := map[string]bool{}
	collect := func(sql string) {
		t.Helper()
		rows, err := conn.Query(ctx, sql)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var waits bool
			if err := rows.Scan(&id, &waits); err != nil {
				t.Fatal(err)
			}
			newer[id] = waits
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	collect(`
		UPDATE deliveries SET state = 'IN_FLIGHT', attempts = 1, leased_until = now() + interval '1 minute'
		WHERE sensor_id IN (SELECT 's' || i FROM generate_series(1, 100) AS i)
		RETURNING id::text, substr(sensor_id, 2)::int <= 50`)
	if _, err := conn.Exec(ctx, `
		WITH n AS (
			INSERT INTO notifications (id, event_id, client_id, sensor_id, type, data, previous, event_at)
			SELECT lockstream_uuid_v7(), 'newer' || i, '018f0000-0000-7000-8000-000000000001', 's' || i,
			       'state_changed', 0, 1, now()
			FROM generate_series(1, 50) AS i
			RETURNING *
		)
		INSERT INTO deliveries (id, notification_id, client_id, sensor_id, event_type, channel, target, state,
		                        next_attempt_at, event_at)
		SELECT lockstream_uuid_v7(), n.id, n.client_id, n.sensor_id, n.type, 'webhook', '', 'PENDING', now(), n.event_at
		FROM n`); err != nil {
		t.Fatal(err)
	}
	collect(`
		INSERT INTO webhooks_in_flight (id, notification_id, client_id, sensor_id, event_id, event_type, event_at,
		                                leased_until)
		SELECT lockstream_uuid_v7(), lockstream_uuid_v7(), '018f0000-0000-7000-8000-000000000001', 's' || i,
		       'handed' || i, 'state_changed', now() - interval '2 seconds', now() + interval '1 minute'
		FROM generate_series(101, 150) AS i
		RETURNING id::text, true`)
	collect(`
		INSERT INTO webhooks_in_flight (id, notification_id, client_id, sensor_id, event_id, event_type, event_at,
		                                leased_until)
		SELECT lockstream_uuid_v7(), lockstream_uuid_v7(), '018f0000-0000-7000-8000-000000000001', 's' || i,
		       'handed' || i, 'state_changed', now() - interval '2 seconds', now() + interval '1 minute'
		FROM generate_series(2001, 2025) AS i
		RETURNING id::text, false`)

	// Every one in flight fails, to be retried.
	var outcomes []string
	for id := range newer {
		outcomes = append(outcomes, id)
	}
	n := len(outcomes)
	attempts, states, next, errs := make([]int32, n), make([]string, n), make([]*time.Time, n), make([]string, n)
	statuses, errorTypes, codes, messages := make([]int32, n), make([]string, n), make([]int32, n), make([]string, n)
	durations, ats, notSent := make([]int32, n), make([]time.Time, n), make([]bool, n)
	retryAt := time.Now().Add(time.Minute)
	for i := range n {
		attempts[i], states[i], next[i], errs[i], statuses[i], ats[i] = 1, "RETRY", &retryAt, "503", 503, time.Now()
	}
	finishPlan, finished := runRolledBack(t, conn, storage.FinishDeliveriesSQL, outcomes, attempts, states, next,
		errs, statuses, errorTypes, codes, messages, durations, ats, notSent)
	sweepPlan, swept := runRolledBack(t, conn, storage.RequeueExpiredLeasesSQL, time.Now().Add(time.Hour),
		"lease expired", "LEASE_EXPIRED")
	for _, step := range []struct {
		name   string
		plan   string
		states map[string]string
		outer  string // the aliases of the rows asked about, in order
		retry  string // the state of one with no newer state waiting
	}{
		{"the outcome write", finishPlan, finished, "dh", "RETRY"},
		{"the lease sweep", sweepPlan, swept, "dg", "PENDING"},
	} {
		t.Logf("%s:\n%s", step.name, step.plan)
		if strings.Contains(step.plan, "lockstream_newer_open_states") {
			t.Errorf("%s calls lockstream_newer_open_states per row instead of inlining it", step.name)
		}
		var outer []string
		for _, m := range newerProbe.FindAllStringSubmatch(step.plan, -1) {
			outer = append(outer, m[1])
		}
		slices.Sort(outer)
		if got := strings.Join(slices.Compact(outer), ""); got != step.outer {
			t.Errorf("%s probes the open deliveries' index for a newer state of %q, want %q", step.name, got, step.outer)
		}
		if len(step.states) != len(newer) {
			t.Errorf("%s returned %d rows, want %d", step.name, len(step.states), len(newer))
		}
		for id, waits := range newer {
			want := step.retry
			if waits {
				want = "SUPERSEDED"
			}
			if got := step.states[id]; got != want {
				t.Errorf("%s left %s %s, want %s", step.name, id, got, want)
			}
		}
	}
}
