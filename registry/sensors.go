package registry

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lockstream/lockstream/internal/pgutil"
	"github.com/lockstream/lockstream/storage"
)

// sensorColumns are selected by every sensor query, in scanSensor's order.
const sensorColumns = `s.id, s.address, s.heartbeat_timeout, s.created_at, s.updated_at,
	st.data, st.changed_at, s.open_alert_after, coalesce(s.site, '')`

const sensorFrom = `FROM sensors s LEFT JOIN sensor_state st ON st.sensor_id = s.id`

func scanSensor(row pgx.Row) (Sensor, error) {
	var (
		s         Sensor
		timeout   *time.Duration
		data      *int16
		changedAt *time.Time
		openAfter *time.Duration
	)
	if err := row.Scan(&s.ID, &s.Address, &timeout, &s.CreatedAt, &s.UpdatedAt, &data, &changedAt, &openAfter, &s.Site); err != nil {
		return Sensor{}, err
	}
	if openAfter != nil {
		s.OpenAlertAfter = *openAfter
	}
	if timeout != nil {
		s.HeartbeatTimeout = *timeout
	}
	if data != nil && changedAt != nil {
		s.State = &SensorState{SensorID: s.ID, Data: int(*data), ChangedAt: *changedAt}
	}
	return s, nil
}

// CreateSensor registers a sensor. It returns storage.ErrConflict when the id is taken.
func (r *Store) CreateSensor(ctx context.Context, s Sensor) (Sensor, error) {
	var timeout, openAfter *time.Duration
	if s.HeartbeatTimeout > 0 {
		timeout = &s.HeartbeatTimeout
	}
	if s.OpenAlertAfter > 0 {
		openAfter = &s.OpenAlertAfter
	}
	_, err := r.pool.Exec(ctx,
		`INSERT INTO sensors (id, address, heartbeat_timeout, open_alert_after, site) VALUES ($1, $2, $3, $4, nullif($5, ''))`,
		s.ID, s.Address, timeout, openAfter, s.Site)
	if err != nil {
		return Sensor{}, fmt.Errorf("creating sensor %s: %w", s.ID, pgutil.MapError(err))
	}
	return r.GetSensor(ctx, s.ID)
}

// GetSensor returns the sensor with its last known state, or storage.ErrNotFound.
func (r *Store) GetSensor(ctx context.Context, id string) (Sensor, error) {
	s, err := scanSensor(r.pool.QueryRow(ctx, `SELECT `+sensorColumns+` `+sensorFrom+` WHERE s.id = $1`, id))
	if err != nil {
		return Sensor{}, fmt.Errorf("getting sensor %s: %w", id, pgutil.MapError(err))
	}
	return s, nil
}

// ListSensors returns up to page.Limit sensors ordered by id, after page.After.
func (r *Store) ListSensors(ctx context.Context, page storage.Page) ([]Sensor, error) {
	rows, err := r.pool.Query(ctx,
		`SELECT `+sensorColumns+` `+sensorFrom+` WHERE s.id > $1 ORDER BY s.id LIMIT $2`,
		page.After, page.Limit)
	if err != nil {
		return nil, fmt.Errorf("listing sensors: %w", err)
	}
	sensors, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Sensor, error) { return scanSensor(row) })
	if err != nil {
		return nil, fmt.Errorf("listing sensors: %w", err)
	}
	return sensors, nil
}

// UpdateSensor changes the fields set in u and returns the sensor as it is now.
func (r *Store) UpdateSensor(ctx context.Context, id string, u SensorUpdate) (Sensor, error) {
	var timeout, openAfter *time.Duration
	if u.HeartbeatTimeout != nil && *u.HeartbeatTimeout > 0 {
		timeout = u.HeartbeatTimeout
	}
	if u.OpenAlertAfter != nil && *u.OpenAlertAfter > 0 {
		openAfter = u.OpenAlertAfter
	}
	tag, err := r.pool.Exec(ctx, `
		UPDATE sensors SET
			address = coalesce($2, address),
			heartbeat_timeout = CASE WHEN $3 THEN $4::interval ELSE heartbeat_timeout END,
			open_alert_after = CASE WHEN $5 THEN $6::interval ELSE open_alert_after END,
			site = CASE WHEN $7::text IS NULL THEN site ELSE nullif($7, '') END,
			updated_at = now()
		WHERE id = $1`,
		id, u.Address, u.HeartbeatTimeout != nil, timeout, u.OpenAlertAfter != nil, openAfter, u.Site)
	if err != nil {
		return Sensor{}, fmt.Errorf("updating sensor %s: %w", id, pgutil.MapError(err))
	}
	if tag.RowsAffected() == 0 {
		return Sensor{}, fmt.Errorf("updating sensor %s: %w", id, storage.ErrNotFound)
	}
	return r.GetSensor(ctx, id)
}

// DeleteSensor removes the sensor and its links to clients. Its recorded state and
// history stay.
func (r *Store) DeleteSensor(ctx context.Context, id string) error {
	tag, err := r.pool.Exec(ctx, `DELETE FROM sensors WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("deleting sensor %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("deleting sensor %s: %w", id, storage.ErrNotFound)
	}
	return nil
}

// SensorsByID returns the registered sensors among ids, ordered by id; ids that are
// not registered are left out.
func (r *Store) SensorsByID(ctx context.Context, ids []string) ([]Sensor, error) {
	rows, err := r.pool.Query(ctx, `SELECT `+sensorColumns+` `+sensorFrom+` WHERE s.id = ANY($1) ORDER BY s.id`, ids)
	if err != nil {
		return nil, fmt.Errorf("getting sensors by id: %w", err)
	}
	sensors, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Sensor, error) { return scanSensor(row) })
	if err != nil {
		return nil, fmt.Errorf("getting sensors by id: %w", err)
	}
	return sensors, nil
}

// CreateSensors registers the sensors ids, all at address, in one statement;
// ids already registered are left as they are. It is for bulk set-ups (the
// ingest benchmark registers its fleet with it).
func (r *Store) CreateSensors(ctx context.Context, ids []string, address string) error {
	_, err := r.pool.Exec(ctx, `
		INSERT INTO sensors (id, address) SELECT id, $2 FROM unnest($1::text[]) AS id
		ON CONFLICT (id) DO NOTHING`, ids, address)
	if err != nil {
		return fmt.Errorf("creating %d sensors: %w", len(ids), err)
	}
	return nil
}

// exactCountBelow is the size under which CountSensors counts rows instead of
// trusting the planner's estimate: cheap there, and the estimate is coarse.
const exactCountBelow = 100_000

// CountSensors returns how many sensors are registered. Below 100,000 it counts
// them (exact is true); above, it returns the planner's estimate
// (pg_class.reltuples, kept by autovacuum's ANALYZE), which costs nothing whatever
// the fleet's size.
func (r *Store) CountSensors(ctx context.Context) (n int64, exact bool, err error) {
	var estimate float64
	if err := r.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'sensors'::regclass`).Scan(&estimate); err != nil {
		return 0, false, fmt.Errorf("estimating the sensor count: %w", err)
	}
	// -1 (PostgreSQL 14+) or 0: never analysed, so no estimate.
	if estimate >= exactCountBelow {
		return int64(estimate), false, nil
	}
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM sensors`).Scan(&n); err != nil {
		return 0, false, fmt.Errorf("counting sensors: %w", err)
	}
	return n, true, nil
}

// SearchSensors returns up to page.Limit sensors whose id starts with prefix
// (case-sensitive), in byte order of their ids, after page.After.
func (r *Store) SearchSensors(ctx context.Context, prefix string, page storage.Page) ([]Sensor, error) {
	// sensors_id_bytes_idx serves the range; '{' follows 'z', the last id character.
	rows, err := r.pool.Query(ctx, `SELECT `+sensorColumns+` `+sensorFrom+`
		WHERE s.id COLLATE "C" >= $1 AND s.id COLLATE "C" > $2 AND s.id COLLATE "C" < $3
		ORDER BY s.id COLLATE "C" LIMIT $4`,
		prefix, page.After, prefix+"{", page.Limit)
	if err != nil {
		return nil, fmt.Errorf("searching sensors %q: %w", prefix, err)
	}
	sensors, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Sensor, error) { return scanSensor(row) })
	if err != nil {
		return nil, fmt.Errorf("searching sensors %q: %w", prefix, err)
	}
	return sensors, nil
}
