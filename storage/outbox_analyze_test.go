package storage_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/storage/storagetest"
)

// TestAnalyzeOutbox checks that the outbox tables have planner statistics
// afterwards: pg_class.reltuples is -1 for a table never analyzed.
func TestAnalyzeOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	conn, err := pgx.Connect(ctx, stores.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	reltuples := func(table string) float64 {
		t.Helper()
		var n float64
		if err := conn.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, table := range []string{"deliveries", "notifications"} {
		if n := reltuples(table); n != -1 {
			t.Fatalf("%s: reltuples %v before, want -1 (never analyzed)", table, n)
		}
	}
	storagetest.AnalyzeOutbox(t, stores.PostgresURL)
	for _, table := range []string{"deliveries", "notifications"} {
		if n := reltuples(table); n != 0 {
			t.Fatalf("%s: reltuples %v after AnalyzeOutbox, want 0 (analyzed, empty)", table, n)
		}
	}
}
