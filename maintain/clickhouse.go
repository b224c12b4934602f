package maintain

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/lockstream/lockstream/storage"
)

// ClickHouseStore is the maintainer's ClickHouse: the month partitions of the
// history tables, listed and dropped.
type ClickHouseStore struct {
	conn driver.Conn
}

// NewClickHouseStore returns the maintainer's store on c's connection.
func NewClickHouseStore(c *storage.ClickHouse) *ClickHouseStore {
	return &ClickHouseStore{conn: c.Conn()}
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
func (c *ClickHouseStore) HistoryPartitions(ctx context.Context, tables []string) ([]HistoryPartition, error) {
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
func (c *ClickHouseStore) DropHistoryPartition(ctx context.Context, hp HistoryPartition) error {
	if _, err := time.Parse("200601", hp.ID); err != nil || !regexp.MustCompile(`^[a-z_]+$`).MatchString(hp.Table) {
		return fmt.Errorf("dropping history partition %s of %s: not a month partition", hp.ID, hp.Table)
	}
	// toYYYYMM partitions are named by their number.
	if err := c.conn.Exec(ctx, `ALTER TABLE `+hp.Table+` DROP PARTITION `+hp.ID); err != nil {
		return fmt.Errorf("dropping history partition %s of %s: %w", hp.ID, hp.Table, err)
	}
	return nil
}
