package storage

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
)

// MonthPartition is one month partition of a table partitioned by month
// (<table>_YYYYMM, months in UTC).
type MonthPartition struct {
	Table string
	Name  string
	// Month is the first instant of the partition's month, UTC.
	Month time.Time
}

// monthSuffix is the YYYYMM ending of a month partition's name.
var monthSuffix = regexp.MustCompile(`_([0-9]{6})$`)

// MonthPartitions lists the month partitions of table, oldest first; none when
// the table does not exist. The DEFAULT partition is not one of them.
func (p *Postgres) MonthPartitions(ctx context.Context, table string) ([]MonthPartition, error) {
	rows, err := p.pool.Query(ctx, `
		SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass($1) ORDER BY c.relname`, table)
	if err != nil {
		return nil, fmt.Errorf("listing partitions of %s: %w", table, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing partitions of %s: %w", table, err)
	}
	var out []MonthPartition
	for _, name := range names {
		m := monthSuffix.FindStringSubmatch(name)
		if m == nil || name != table+m[0] {
			continue
		}
		month, err := time.Parse("200601", m[1])
		if err != nil {
			continue
		}
		out = append(out, MonthPartition{Table: table, Name: name, Month: month})
	}
	return out, nil
}

// CreateMonthPartition creates table's partition of the month holding month,
// unless it exists, and returns its name; "" when the table does not exist (a
// table of a feature this database does not have yet).
func (p *Postgres) CreateMonthPartition(ctx context.Context, table string, month time.Time) (string, error) {
	var name *string
	err := p.pool.QueryRow(ctx, `
		SELECT CASE WHEN to_regclass($1) IS NULL THEN NULL ELSE lockstream_month_partition($1, $2) END`,
		table, month).Scan(&name)
	if err != nil {
		return "", fmt.Errorf("creating the %s partition of %s: %w", month.UTC().Format("2006-01"), table, err)
	}
	if name == nil {
		return "", nil
	}
	return *name, nil
}

// OpenDeliveries counts the deliveries in a partition of deliveries that may
// still be sent (SCHEDULED, PENDING, RETRY, IN_FLIGHT, and PAUSED: kept for a
// disabled endpoint); it reads the partition's small indexes of open and of
// paused deliveries.
func (p *Postgres) OpenDeliveries(ctx context.Context, partition MonthPartition) (int64, error) {
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
func (p *Postgres) DefaultPartitionRows(ctx context.Context, table string) (int64, error) {
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

// DropMonthPartition drops a month partition whole: retention without a scan
// or a row-by-row DELETE.
func (p *Postgres) DropMonthPartition(ctx context.Context, partition MonthPartition) error {
	if m := monthSuffix.FindString(partition.Name); m == "" || partition.Name != partition.Table+m {
		return fmt.Errorf("dropping %s: not a month partition of %s", partition.Name, partition.Table)
	}
	if _, err := p.pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{partition.Name}.Sanitize()); err != nil {
		return fmt.Errorf("dropping partition %s: %w", partition.Name, err)
	}
	return nil
}

// HistoryPartition is one month partition (toYYYYMM) of a ClickHouse table.
type HistoryPartition struct {
	Table string
	// ID is the partition's id, YYYYMM.
	ID    string
	Month time.Time
}

// HistoryPartitions lists the month partitions of the tables holding data, from
// system.parts.
func (c *ClickHouse) HistoryPartitions(ctx context.Context, tables []string) ([]HistoryPartition, error) {
	rows, err := c.conn.Query(ctx, `
		SELECT DISTINCT table, partition_id FROM system.parts
		WHERE database = currentDatabase() AND active AND has(?, table)
		ORDER BY table, partition_id`, tables)
	if err != nil {
		return nil, fmt.Errorf("listing history partitions: %w", err)
	}
	defer rows.Close()
	var out []HistoryPartition
	for rows.Next() {
		var hp HistoryPartition
		if err := rows.Scan(&hp.Table, &hp.ID); err != nil {
			return nil, fmt.Errorf("listing history partitions: %w", err)
		}
		month, err := time.Parse("200601", hp.ID)
		if err != nil {
			continue // not a month partition
		}
		hp.Month = month
		out = append(out, hp)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing history partitions: %w", err)
	}
	return out, nil
}

// DropHistoryPartition drops a month partition of a ClickHouse table.
func (c *ClickHouse) DropHistoryPartition(ctx context.Context, hp HistoryPartition) error {
	if _, err := time.Parse("200601", hp.ID); err != nil || !regexp.MustCompile(`^[a-z_]+$`).MatchString(hp.Table) {
		return fmt.Errorf("dropping history partition %s of %s: not a month partition", hp.ID, hp.Table)
	}
	// toYYYYMM partitions are named by their number.
	if err := c.conn.Exec(ctx, `ALTER TABLE `+hp.Table+` DROP PARTITION `+hp.ID); err != nil {
		return fmt.Errorf("dropping history partition %s of %s: %w", hp.ID, hp.Table, err)
	}
	return nil
}
