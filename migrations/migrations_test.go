package migrations_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/migrations"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// Two processes starting at once must not trip over each other, and a second run must
// be a no-op.
func TestMigrateConcurrentlyAndTwice(t *testing.T) {
	t.Parallel()
	pgURL := storagetest.NewPostgresDatabase(t)
	chURL := storagetest.NewClickHouseDatabase(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()

	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = migrations.Migrate(ctx, pgURL, chURL, logger)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate %d: %v", i, err)
		}
	}
	if err := migrations.Migrate(ctx, pgURL, chURL, logger); err != nil {
		t.Fatalf("second migrate: %v", err)
	}

	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, table := range []string{"sensors", "clients", "push_targets", "client_sensors", "sensor_state"} {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "public."+table).Scan(&exists); err != nil || !exists {
			t.Errorf("postgres table %s: exists=%v err=%v", table, exists, err)
		}
	}
	var applied int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied == 0 {
		t.Error("goose recorded no postgres migration")
	}

	ch, database := openClickHouse(t, chURL)
	for _, table := range []string{"readings", "events"} {
		var n uint64
		if err := ch.QueryRow(ctx, `SELECT count() FROM system.tables WHERE database = ? AND name = ?`,
			database, table).Scan(&n); err != nil || n != 1 {
			t.Errorf("clickhouse table %s: count=%d err=%v", table, n, err)
		}
	}
	// Each version is recorded once even though three runs raced for it.
	var records, versions uint64
	if err := ch.QueryRow(ctx, `SELECT count(), uniqExact(version) FROM schema_migrations`).Scan(&records, &versions); err != nil {
		t.Fatal(err)
	}
	if records != versions || versions == 0 {
		t.Errorf("schema_migrations: %d records for %d versions", records, versions)
	}
}

func TestMigrateRejectsURLWithoutDatabase(t *testing.T) {
	t.Parallel()
	pgURL := storagetest.NewPostgresDatabase(t)
	err := migrations.Migrate(context.Background(), pgURL, "clickhouse://127.0.0.1:9000", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "names no database") {
		t.Fatalf("migrate with a ClickHouse URL naming no database: err = %v, want one saying so", err)
	}
}

// TestMigrateRepeatsClickHouseStatementsSafely is a run that crashed after
// applying ClickHouse statements and before recording them: with the records
// gone, the next run applies every statement again, including the ADD COLUMNs
// that 18.16 cannot write as IF NOT EXISTS, and succeeds.
func TestMigrateRepeatsClickHouseStatementsSafely(t *testing.T) {
	t.Parallel()
	pgURL := storagetest.NewPostgresDatabase(t)
	chURL := storagetest.NewClickHouseDatabase(t)
	var log strings.Builder // the handler serialises its writes
	logger := slog.New(slog.NewTextHandler(&log, nil))
	ctx := context.Background()
	if err := migrations.Migrate(ctx, pgURL, chURL, logger); err != nil {
		t.Fatal(err)
	}
	ch, database := openClickHouse(t, chURL)
	if err := ch.Exec(ctx, `DROP TABLE schema_migrations`); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Migrate(ctx, pgURL, chURL, logger); err != nil {
		t.Fatalf("migrate over an applied schema without its records: %v", err)
	}
	if !strings.Contains(log.String(), "column already added by an earlier run") {
		t.Errorf("the second run re-applied no ADD COLUMN; log:\n%s", log.String())
	}
	var n uint64
	if err := ch.QueryRow(ctx, `SELECT count() FROM system.columns WHERE database = ? AND table = 'delivery_attempts'
		AND name IN ('answer_code', 'answer_message')`, database).Scan(&n); err != nil || n != 2 {
		t.Fatalf("delivery_attempts answer columns: %d, %v; want 2", n, err)
	}
}

// openClickHouse connects to the ClickHouse database of url, closed when t
// ends, and returns the database's name.
func openClickHouse(t *testing.T, url string) (driver.Conn, string) {
	t.Helper()
	opts, err := clickhouse.ParseDSN(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.Close() })
	return ch, opts.Auth.Database
}
