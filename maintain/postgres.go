package maintain

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockstream/lockstream/storage"
)

// PostgresStore is the maintainer's Postgres: the month partitions (shared
// plumbing in storage) and what its policy reads: the open deliveries that
// keep a month, the rows that fell outside every month.
type PostgresStore struct {
	partitions *storage.Postgres
	pool       *pgxpool.Pool
}

// NewPostgresStore returns the maintainer's store on p.
func NewPostgresStore(p *storage.Postgres) *PostgresStore {
	return &PostgresStore{partitions: p, pool: p.Pool()}
}

// MonthPartitions lists table's month partitions, oldest first.
func (p *PostgresStore) MonthPartitions(ctx context.Context, table string) ([]storage.MonthPartition, error) {
	return p.partitions.MonthPartitions(ctx, table)
}

// CreateMonthPartition makes table's partition of month's month unless it
// exists; "" when the table does not exist.
func (p *PostgresStore) CreateMonthPartition(ctx context.Context, table string, month time.Time) (string, error) {
	return p.partitions.CreateMonthPartition(ctx, table, month)
}

// DropMonthPartition drops a month partition whole.
func (p *PostgresStore) DropMonthPartition(ctx context.Context, partition storage.MonthPartition) error {
	return p.partitions.DropMonthPartition(ctx, partition)
}

// OpenDeliveries counts the deliveries in a partition of deliveries that may
// still be sent (SCHEDULED, PENDING, RETRY, IN_FLIGHT, and PAUSED: kept for a
// disabled endpoint); it reads the partition's small indexes of open and of
// paused deliveries.
func (p *PostgresStore) OpenDeliveries(ctx context.Context, partition storage.MonthPartition) (int64, error) {
	var n int64
	table := pgx.Identifier{partition.Name}.Sanitize()
	err := p.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+table+`
		WHERE state IN ('SCHEDULED', 'PENDING', 'RETRY', 'IN_FLIGHT'))
		+ (SELECT count(*) FROM `+table+` WHERE state = 'PAUSED')`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting open deliveries in %s: %w", partition.Name, err)
	}
	return n, nil
}

// DefaultPartitionRows counts the rows in table's DEFAULT partition
// (<table>_default): rows whose time fell outside every month partition, which
// retention does not drop. 0 when there is no such partition.
func (p *PostgresStore) DefaultPartitionRows(ctx context.Context, table string) (int64, error) {
	var exists bool
	if err := p.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table+"_default").Scan(&exists); err != nil || !exists {
		return 0, err
	}
	var n int64
	if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table + "_default"}.Sanitize()).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting rows of %s_default: %w", table, err)
	}
	return n, nil
}

// DeleteNotificationKeys deletes at most limit of the free-form notifications'
// idempotency keys recorded before before, oldest first, and returns how many
// it deleted; it reads their index by time.
func (p *PostgresStore) DeleteNotificationKeys(ctx context.Context, before time.Time, limit int) (int64, error) {
	tag, err := p.pool.Exec(ctx, `DELETE FROM notification_keys WHERE key IN (
		SELECT key FROM notification_keys WHERE recorded_at < $1 ORDER BY recorded_at LIMIT $2)`, before, limit)
	if err != nil {
		return 0, fmt.Errorf("deleting notification keys recorded before %s: %w", before.Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}
