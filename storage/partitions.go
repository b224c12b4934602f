package storage

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
)

// Month partitions of the Postgres tables that grow with traffic: listing,
// making and dropping them is shared plumbing; which months to make, keep and
// drop is package maintain's policy.

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
