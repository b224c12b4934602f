// Package migrations holds lockstream's versioned Postgres and ClickHouse schemas,
// embedded in the binary, and applies them with goose.
//
// ClickHouse migrations do not go through goose: its ClickHouse dialect records
// versions with database/sql INSERTs carrying arguments, which hang against
// ClickHouse 18.16's native protocol. clickhouse.go applies them with the native
// batch API instead.
//
// Migrate is safe to run twice and from several processes at once: it holds a Postgres
// advisory lock for the whole run (ClickHouse has no locks of its own, so its
// migrations run under the same lock), and every ClickHouse statement is idempotent.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

//go:embed postgres/*.sql clickhouse/*.sql
var files embed.FS

// advisoryLockKey serialises concurrent Migrate calls across processes. It is an
// arbitrary constant ("lockstrm" in ASCII).
const advisoryLockKey int64 = 0x6c6f636b7374726d

// Migrate brings both schemas up to date: Postgres at pgURL and ClickHouse at chURL
// (clickhouse://host:port/database; the database is created if absent).
func Migrate(ctx context.Context, pgURL, chURL string, logger *slog.Logger) error {
	pgConfig, err := pgx.ParseConfig(pgURL)
	if err != nil {
		return fmt.Errorf("parsing postgres URL: %w", err)
	}
	pgDB := stdlib.OpenDB(*pgConfig)
	defer pgDB.Close()

	// The lock lives on one session, so pin a connection for the whole run.
	lockConn, err := pgDB.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connecting to postgres: %w", err)
	}
	defer lockConn.Close()
	if _, err := lockConn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", advisoryLockKey); err != nil {
		return fmt.Errorf("taking the migration lock: %w", err)
	}
	defer func() {
		// Unlock on a fresh context: the caller's may be cancelled by now, and closing
		// the connection releases the lock anyway.
		_, _ = lockConn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", advisoryLockKey)
	}()

	if err := migratePostgres(ctx, pgDB, logger); err != nil {
		return err
	}
	return migrateClickHouse(ctx, chURL, logger)
}

func migratePostgres(ctx context.Context, db *sql.DB, logger *slog.Logger) error {
	fsys, err := fs.Sub(files, "postgres")
	if err != nil {
		return fmt.Errorf("postgres migrations: %w", err)
	}
	// Out of order allowed: each branch of work numbers its files in a range of
	// its own, so a database already at a later version (00090) still takes an
	// earlier file merged after it (00030).
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithAllowOutofOrder(true))
	if err != nil {
		return fmt.Errorf("postgres migrations: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrating postgres: %w", err)
	}
	logResults(logger, "postgres", results)
	return nil
}

func migrateClickHouse(ctx context.Context, chURL string, logger *slog.Logger) error {
	opts, err := clickhouse.ParseDSN(chURL)
	if err != nil {
		return fmt.Errorf("parsing clickhouse URL: %w", err)
	}
	database := opts.Auth.Database
	if database == "" {
		return errors.New("clickhouse URL names no database (clickhouse://host:9000/lockstream)")
	}
	if err := createClickHouseDatabase(ctx, *opts, database); err != nil {
		return err
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return fmt.Errorf("connecting to clickhouse: %w", err)
	}
	defer conn.Close()
	if err := (&clickHouseMigrator{conn: conn, logger: logger}).up(ctx); err != nil {
		return fmt.Errorf("migrating clickhouse database %s: %w", database, err)
	}
	return nil
}

// createClickHouseDatabase connects without a database, since the one named may not
// exist yet.
func createClickHouseDatabase(ctx context.Context, opts clickhouse.Options, database string) error {
	if strings.ContainsAny(database, "`\\") {
		return fmt.Errorf("clickhouse database name %q has forbidden characters", database)
	}
	opts.Auth.Database = "default"
	conn, err := clickhouse.Open(&opts)
	if err != nil {
		return fmt.Errorf("connecting to clickhouse: %w", err)
	}
	defer conn.Close()
	if err := conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS `"+database+"`"); err != nil {
		return fmt.Errorf("creating clickhouse database %s: %w", database, err)
	}
	return nil
}

func logResults(logger *slog.Logger, store string, results []*goose.MigrationResult) {
	if len(results) == 0 {
		logger.Info("schema up to date", "store", store)
	}
	for _, r := range results {
		logger.Info("migration applied", "store", store, "version", r.Source.Version,
			"file", r.Source.Path, "duration", r.Duration)
	}
}
