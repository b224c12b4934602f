package heartbeat

import (
	"context"
	"fmt"
	"time"
)

// SensorFact is what the heartbeat needs to know of a lost sensor.
type SensorFact struct {
	// Data is the sensor's last known state; nil before its first reading.
	Data *int
	// Site is the sensor's site; empty when it has none (or it is not
	// registered).
	Site string
}

// SensorFacts returns the last known state and the site of each of ids that
// has either, in one query; the heartbeat puts the state in the connection_lost
// events it publishes, so a loss while unlocked is graded critical, and judges
// sites by the site.
func (p *PostgresStore) SensorFacts(ctx context.Context, ids []string) (map[string]SensorFact, error) {
	out := make(map[string]SensorFact, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := p.pool.Query(ctx, `
		SELECT x.id, st.data, coalesce(s.site, '')
		FROM unnest($1::text[]) AS x (id)
		LEFT JOIN sensor_state st ON st.sensor_id = x.id
		LEFT JOIN sensors s ON s.id = x.id
		WHERE st.sensor_id IS NOT NULL OR s.site IS NOT NULL`, ids)
	if err != nil {
		return nil, fmt.Errorf("reading the state and site of %d sensors: %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id   string
			data *int16
			f    SensorFact
		)
		if err := rows.Scan(&id, &data, &f.Site); err != nil {
			return nil, fmt.Errorf("reading the state and site of %d sensors: %w", len(ids), err)
		}
		f.Data = intPtr(data)
		out[id] = f
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the state and site of %d sensors: %w", len(ids), err)
	}
	return out, nil
}

// OpenAlert is a sensor left unlocked for longer than its open_alert_after.
type OpenAlert struct {
	SensorID string
	// OpenedAt is when the sensor was unlocked (its state's changed_at): it
	// names the opening, which is reported once.
	OpenedAt time.Time
	// After is the sensor's open_alert_after.
	After time.Duration
}

// At is when the opening became too long.
func (a OpenAlert) At() time.Time { return a.OpenedAt.Add(a.After) }

// DueOpenAlerts returns up to limit sensors unlocked since at least their
// open_alert_after before now whose opening was not reported yet
// (MarkOpenAlerted), oldest first. It reads only the sensors that set
// open_alert_after (a partial index) and their states.
func (p *PostgresStore) DueOpenAlerts(ctx context.Context, now time.Time, limit int) ([]OpenAlert, error) {
	rows, err := p.pool.Query(ctx, `
		SELECT s.id, st.changed_at, s.open_alert_after
		FROM sensors s JOIN sensor_state st ON st.sensor_id = s.id
		WHERE s.open_alert_after IS NOT NULL AND st.data = 0
		  AND st.changed_at + s.open_alert_after <= $1
		  AND st.open_alerted_at IS DISTINCT FROM st.changed_at
		ORDER BY st.changed_at + s.open_alert_after, s.id
		LIMIT $2`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("finding sensors open too long: %w", err)
	}
	defer rows.Close()
	var out []OpenAlert
	for rows.Next() {
		var a OpenAlert
		if err := rows.Scan(&a.SensorID, &a.OpenedAt, &a.After); err != nil {
			return nil, fmt.Errorf("finding sensors open too long: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("finding sensors open too long: %w", err)
	}
	return out, nil
}

// MarkOpenAlerted records that these openings were reported, in one statement.
// A sensor whose state changed meanwhile is left alone: its new opening (if it
// is one) is reported on its own.
func (p *PostgresStore) MarkOpenAlerted(ctx context.Context, alerts []OpenAlert) error {
	if len(alerts) == 0 {
		return nil
	}
	ids := make([]string, len(alerts))
	opened := make([]time.Time, len(alerts))
	for i, a := range alerts {
		ids[i], opened[i] = a.SensorID, a.OpenedAt
	}
	_, err := p.pool.Exec(ctx, `
		UPDATE sensor_state st SET open_alerted_at = a.opened_at
		FROM unnest($1::text[], $2::timestamptz[]) AS a (sensor_id, opened_at)
		WHERE st.sensor_id = a.sensor_id AND st.changed_at = a.opened_at`, ids, opened)
	if err != nil {
		return fmt.Errorf("marking %d openings reported: %w", len(alerts), err)
	}
	return nil
}

// Stabilized is an unstable sensor quiet for a flap window: its streak is
// over.
type Stabilized struct {
	SensorID string
	// Data is its final state; ChangedAt when it took it.
	Data      int
	ChangedAt time.Time
	// UnstableSince names the streak.
	UnstableSince time.Time
}

// DueStable returns up to limit unstable sensors whose last change is at
// least window before now, over the partial index of unstable sensors.
func (p *PostgresStore) DueStable(ctx context.Context, now time.Time, window time.Duration, limit int) ([]Stabilized, error) {
	rows, err := p.pool.Query(ctx, `
		SELECT sensor_id, data, changed_at, unstable_since FROM sensor_state
		WHERE unstable_since IS NOT NULL AND changed_at + $2::interval <= $1
		ORDER BY changed_at LIMIT $3`, now, window, limit)
	if err != nil {
		return nil, fmt.Errorf("finding sensors stable again: %w", err)
	}
	defer rows.Close()
	var out []Stabilized
	for rows.Next() {
		var (
			s    Stabilized
			data int16
		)
		if err := rows.Scan(&s.SensorID, &data, &s.ChangedAt, &s.UnstableSince); err != nil {
			return nil, fmt.Errorf("finding sensors stable again: %w", err)
		}
		s.Data = int(data)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("finding sensors stable again: %w", err)
	}
	return out, nil
}

// ClearUnstable ends these streaks, in one statement; a sensor whose state or
// streak changed meanwhile is left alone.
func (p *PostgresStore) ClearUnstable(ctx context.Context, stable []Stabilized) error {
	if len(stable) == 0 {
		return nil
	}
	ids := make([]string, len(stable))
	since := make([]time.Time, len(stable))
	changed := make([]time.Time, len(stable))
	for i, s := range stable {
		ids[i], since[i], changed[i] = s.SensorID, s.UnstableSince, s.ChangedAt
	}
	_, err := p.pool.Exec(ctx, `
		UPDATE sensor_state st SET unstable_since = NULL
		FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS x (sensor_id, since, changed_at)
		WHERE st.sensor_id = x.sensor_id AND st.unstable_since = x.since AND st.changed_at = x.changed_at`,
		ids, since, changed)
	if err != nil {
		return fmt.Errorf("ending %d unstable streaks: %w", len(stable), err)
	}
	return nil
}

// intPtr widens a nullable smallint.
func intPtr(v *int16) *int {
	if v == nil {
		return nil
	}
	i := int(*v)
	return &i
}
