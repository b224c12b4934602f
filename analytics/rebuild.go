package analytics

import (
	"context"
	"fmt"
	"time"

	"github.com/lockstream/lockstream/storage"
)

// rollups are the rollup tables and how each is computed from its raw table
// (the SELECT of its materialized view, with FINAL: copies collapsed).
var rollups = []struct {
	table, columns, sel string
}{
	{"readings_hourly", "sensor_id, hour, readings", `
		SELECT sensor_id, toDateTime(intDiv(toUInt32(received_at), 3600) * 3600) AS hour, count() AS readings
		FROM readings FINAL
		WHERE toYYYYMM(toDateTime(intDiv(toUInt32(received_at), 3600) * 3600)) = %d
		GROUP BY sensor_id, hour`},
	{"events_hourly", "sensor_id, hour, changes, unlocks, unlocked_n, unlocked_t, losses, restores, lost_n, lost_t", `
		SELECT sensor_id, toDateTime(intDiv(toUInt32(at), 3600) * 3600) AS hour,` + rawEventSums + `
		FROM events FINAL
		WHERE toYYYYMM(toDateTime(intDiv(toUInt32(at), 3600) * 3600)) = %d
		GROUP BY sensor_id, hour`},
	{"fleet_readings_hourly", "hour, readings", `
		SELECT toDateTime(intDiv(toUInt32(received_at), 3600) * 3600) AS hour, count() AS readings
		FROM readings FINAL
		WHERE toYYYYMM(toDateTime(intDiv(toUInt32(received_at), 3600) * 3600)) = %d
		GROUP BY hour`},
	{"fleet_events_hourly", "hour, changes, unlocks, unlocked_n, unlocked_t, losses, restores, lost_n, lost_t", `
		SELECT toDateTime(intDiv(toUInt32(at), 3600) * 3600) AS hour,` + rawEventSums + `
		FROM events FINAL
		WHERE toYYYYMM(toDateTime(intDiv(toUInt32(at), 3600) * 3600)) = %d
		GROUP BY hour`},
}

// RebuildRollups recomputes the rollups of every month partition that
// [from, to) touches from the raw tables, copies collapsed: the repair for
// rows the history writer inserted twice (a replay after a crash), which the
// materialized views summed twice, and for rows inserted while the rollups'
// migration ran. Each month is computed into a staging table and swapped in
// whole (REPLACE PARTITION, ClickHouse 18.16 has it), so readers see the old
// month or the new one. Rows inserted into a month while it is rebuilt may
// be missed by its rollup: rebuild months that are closed, or rebuild again.
func (s *Store) RebuildRollups(ctx context.Context, from, to time.Time) error {
	for _, r := range rollups {
		if err := s.conn.Exec(ctx, fmt.Sprintf("CREATE TABLE IF NOT EXISTS %[1]s_rebuild AS %[1]s", r.table)); err != nil {
			return fmt.Errorf("staging %s: %w", r.table, storage.Unreachable(store, err))
		}
	}
	for m := time.Date(from.UTC().Year(), from.UTC().Month(), 1, 0, 0, 0, 0, time.UTC); m.Before(to); m = m.AddDate(0, 1, 0) {
		month := m.Year()*100 + int(m.Month())
		for _, r := range rollups {
			if err := s.rebuildMonth(ctx, r.table, r.columns, r.sel, month); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Store) rebuildMonth(ctx context.Context, table, columns, sel string, month int) error {
	stage := table + "_rebuild"
	for _, step := range []struct {
		sql  string
		args []any
	}{
		{fmt.Sprintf("ALTER TABLE %s DROP PARTITION %d", stage, month), nil},
		// The month is formatted in: an INSERT … SELECT takes no arguments.
		{fmt.Sprintf("INSERT INTO %s (%s) "+sel, stage, columns, month), nil},
		{fmt.Sprintf("ALTER TABLE %s REPLACE PARTITION %d FROM %s", table, month, stage), nil},
		{fmt.Sprintf("ALTER TABLE %s DROP PARTITION %d", stage, month), nil},
	} {
		if err := s.conn.Exec(ctx, step.sql, step.args...); err != nil {
			return fmt.Errorf("rebuilding %s for %d: %w", table, month, storage.Unreachable(store, err))
		}
	}
	return nil
}
