package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// clickHouseMigrator applies clickhouse/NNNNN_name.sql files in order and records each
// in schema_migrations. Every statement in them must be idempotent (IF NOT EXISTS),
// because ClickHouse DDL is not transactional: a crash between a statement and its
// record makes the next run apply it again. ClickHouse 18.16 has no
// ADD COLUMN IF NOT EXISTS, so an ALTER TABLE … ADD COLUMN that finds its column
// already there counts as applied (see columnExists).
type clickHouseMigrator struct {
	conn   driver.Conn
	logger *slog.Logger
}

type clickHouseMigration struct {
	version    uint32
	file       string
	statements []string
}

func (m *clickHouseMigrator) up(ctx context.Context) error {
	if err := m.conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version UInt32, applied_at DateTime) ENGINE = MergeTree ORDER BY version`); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	var current uint32
	if err := m.conn.QueryRow(ctx, `SELECT toUInt32(max(version)) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	all, err := clickHouseMigrations()
	if err != nil {
		return err
	}
	applied := 0
	for _, mig := range all {
		if mig.version <= current {
			continue
		}
		start := time.Now()
		for _, stmt := range mig.statements {
			if err := m.conn.Exec(ctx, stmt); err != nil {
				if !columnExists(stmt, err) {
					return fmt.Errorf("%s: %w", mig.file, err)
				}
				m.logger.Info("column already added by an earlier run", "store", "clickhouse", "file", mig.file)
			}
		}
		// INSERT through the batch API: plain INSERTs with arguments hang on 18.16.
		batch, err := m.conn.PrepareBatch(ctx, `INSERT INTO schema_migrations (version, applied_at)`)
		if err != nil {
			return fmt.Errorf("recording %s: %w", mig.file, err)
		}
		if err := batch.Append(mig.version, time.Now()); err != nil {
			return fmt.Errorf("recording %s: %w", mig.file, err)
		}
		if err := batch.Send(); err != nil {
			return fmt.Errorf("recording %s: %w", mig.file, err)
		}
		applied++
		m.logger.Info("migration applied", "store", "clickhouse", "version", mig.version,
			"file", mig.file, "duration", time.Since(start))
	}
	if applied == 0 {
		m.logger.Info("schema up to date", "store", "clickhouse")
	}
	return nil
}

// columnExists reports whether err is ClickHouse refusing to add a column that
// the statement, a single-column ALTER TABLE … ADD COLUMN, already added: code 44
// on 18.16, 15 (DUPLICATE_COLUMN) on current releases.
func columnExists(stmt string, err error) bool {
	var e *clickhouse.Exception
	if !errors.As(err, &e) || (e.Code != 44 && e.Code != 15) || !strings.Contains(e.Message, "already exists") {
		return false
	}
	fields := strings.Fields(strings.ToUpper(stmt))
	return len(fields) > 5 && fields[0] == "ALTER" && fields[1] == "TABLE" && fields[3] == "ADD" &&
		fields[4] == "COLUMN" && !strings.Contains(stmt, ",")
}

// clickHouseMigrations reads the embedded files, sorted by version.
func clickHouseMigrations() ([]clickHouseMigration, error) {
	entries, err := fs.ReadDir(files, "clickhouse")
	if err != nil {
		return nil, fmt.Errorf("reading clickhouse migrations: %w", err)
	}
	var out []clickHouseMigration
	for _, e := range entries {
		name := e.Name()
		prefix, _, ok := strings.Cut(name, "_")
		if !ok || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("clickhouse migration %s: want NNNNN_name.sql", name)
		}
		version, err := strconv.ParseUint(prefix, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("clickhouse migration %s: bad version: %w", name, err)
		}
		body, err := fs.ReadFile(files, path.Join("clickhouse", name))
		if err != nil {
			return nil, fmt.Errorf("reading clickhouse migration %s: %w", name, err)
		}
		out = append(out, clickHouseMigration{version: uint32(version), file: name, statements: splitStatements(string(body))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// splitStatements drops comment lines and splits on semicolons that end a line.
func splitStatements(sql string) []string {
	var (
		stmts   []string
		current strings.Builder
	)
	for _, line := range strings.Split(sql, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		current.WriteString(line)
		current.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			stmts = append(stmts, strings.TrimSuffix(strings.TrimSpace(current.String()), ";"))
			current.Reset()
		}
	}
	if rest := strings.TrimSpace(current.String()); rest != "" {
		stmts = append(stmts, rest)
	}
	return stmts
}
