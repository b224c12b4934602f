package analytics

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

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
// migration ran. Each month is computed into a staging table of this call's
// own (so that rebuilds by two maintainers at once do not mix) and swapped in
// whole (REPLACE PARTITION, ClickHouse 18.16 has it), so readers see the old
// month or the new one. Rows inserted into a month while it is rebuilt may
// be missed by its rollup: rebuild months that are closed, or rebuild again
// (CheckRollups tells).
func (s *Store) RebuildRollups(ctx context.Context, from, to time.Time) (err error) {
	suffix := "_rebuild_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	for _, r := range rollups {
		stage := r.table + suffix
		if err := s.conn.Exec(ctx, fmt.Sprintf("CREATE TABLE %s AS %s", stage, r.table)); err != nil {
			return fmt.Errorf("staging %s: %w", r.table, storage.Unreachable(store, err))
		}
		defer func() {
			// Even when ctx ended: a staging table left behind is clutter.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if derr := s.conn.Exec(dctx, "DROP TABLE IF EXISTS "+stage); derr != nil && err == nil {
				err = fmt.Errorf("dropping %s: %w", stage, storage.Unreachable(store, derr))
			}
		}()
	}
	for m := time.Date(from.UTC().Year(), from.UTC().Month(), 1, 0, 0, 0, 0, time.UTC); m.Before(to); m = m.AddDate(0, 1, 0) {
		month := m.Year()*100 + int(m.Month())
		for _, r := range rollups {
			if err := s.rebuildMonth(ctx, r.table, r.table+suffix, r.columns, r.sel, month); err != nil {
				return err
			}
		}
		// The rebuilt month holds no restore durations: unseal its hours.
		if err := s.conn.Exec(ctx, fmt.Sprintf(`INSERT INTO history_touched (hour, touched_at)
			SELECT hour, now() FROM fleet_events_hourly WHERE toYYYYMM(hour) = %d GROUP BY hour`, month)); err != nil {
			return fmt.Errorf("unsealing %d: %w", month, storage.Unreachable(store, err))
		}
	}
	return nil
}

func (s *Store) rebuildMonth(ctx context.Context, table, stage, columns, sel string, month int) error {
	for _, step := range []struct {
		sql  string
		args []any
	}{
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

// RollupDrift is how far a month's rollups are from its raw rows, copies
// collapsed: each field is the rollup's sum minus the raw tables' count
// (FINAL); all zero when the rollups are exact.
type RollupDrift struct {
	Readings, Events, FleetReadings, FleetEvents int64
}

// Zero reports whether the rollups agree with the raw rows.
func (d RollupDrift) Zero() bool { return d == RollupDrift{} }

// countedEvents are the event types the rollups count (changes, losses,
// restores): a copy of any of them shows in the counts.
const countedEvents = `type IN ('state_changed', 'connection_lost', 'connection_restored')`

// CheckRollups compares the month of month (UTC) in every rollup with the raw
// tables read FINAL: one query, a scan of the month's raw rows (their sort
// keys) — cheaper than rebuilding, and nothing is written. A row inserted
// twice shows as a positive drift, rows the views missed (inserted while a
// migration or a rebuild ran) as a negative one.
func (s *Store) CheckRollups(ctx context.Context, month time.Time) (RollupDrift, error) {
	m := month.UTC().Year()*100 + int(month.UTC().Month())
	hour := func(col string) string {
		return fmt.Sprintf("toYYYYMM(toDateTime(intDiv(toUInt32(%s), 3600) * 3600)) = %d", col, m)
	}
	// Each raw count once: the scans are the cost.
	q := fmt.Sprintf(`SELECT
		toInt64((SELECT sum(readings) FROM readings_hourly WHERE %[1]s)),
		toInt64((SELECT sum(changes + losses + restores) FROM events_hourly WHERE %[1]s)),
		toInt64((SELECT sum(readings) FROM fleet_readings_hourly WHERE %[1]s)),
		toInt64((SELECT sum(changes + losses + restores) FROM fleet_events_hourly WHERE %[1]s)),
		toInt64((SELECT count() FROM readings FINAL WHERE %[2]s)),
		toInt64((SELECT count() FROM events FINAL WHERE %[3]s AND %[4]s))`,
		hour("hour"), hour("received_at"), hour("at"), countedEvents)
	var d RollupDrift
	var readings, events int64
	if err := s.conn.QueryRow(ctx, q).Scan(&d.Readings, &d.Events, &d.FleetReadings, &d.FleetEvents, &readings, &events); err != nil {
		return RollupDrift{}, fmt.Errorf("checking the rollups of %d: %w", m, storage.Unreachable(store, err))
	}
	d.Readings -= readings
	d.FleetReadings -= readings
	d.Events -= events
	d.FleetEvents -= events
	return d, nil
}
