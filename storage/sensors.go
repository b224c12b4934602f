package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lockstream/lockstream/internal/pgutil"
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

// CreateSensor registers a sensor. It returns ErrConflict when the id is taken.
func (p *Postgres) CreateSensor(ctx context.Context, s Sensor) (Sensor, error) {
	var timeout, openAfter *time.Duration
	if s.HeartbeatTimeout > 0 {
		timeout = &s.HeartbeatTimeout
	}
	if s.OpenAlertAfter > 0 {
		openAfter = &s.OpenAlertAfter
	}
	_, err := p.pool.Exec(ctx,
		`INSERT INTO sensors (id, address, heartbeat_timeout, open_alert_after, site) VALUES ($1, $2, $3, $4, nullif($5, ''))`,
		s.ID, s.Address, timeout, openAfter, s.Site)
	if err != nil {
		return Sensor{}, fmt.Errorf("creating sensor %s: %w", s.ID, pgutil.MapError(err))
	}
	return p.GetSensor(ctx, s.ID)
}

// GetSensor returns the sensor with its last known state, or ErrNotFound.
func (p *Postgres) GetSensor(ctx context.Context, id string) (Sensor, error) {
	s, err := scanSensor(p.pool.QueryRow(ctx, `SELECT `+sensorColumns+` `+sensorFrom+` WHERE s.id = $1`, id))
	if err != nil {
		return Sensor{}, fmt.Errorf("getting sensor %s: %w", id, pgutil.MapError(err))
	}
	return s, nil
}

// ListSensors returns up to page.Limit sensors ordered by id, after page.After.
func (p *Postgres) ListSensors(ctx context.Context, page Page) ([]Sensor, error) {
	rows, err := p.pool.Query(ctx,
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
func (p *Postgres) UpdateSensor(ctx context.Context, id string, u SensorUpdate) (Sensor, error) {
	var timeout, openAfter *time.Duration
	if u.HeartbeatTimeout != nil && *u.HeartbeatTimeout > 0 {
		timeout = u.HeartbeatTimeout
	}
	if u.OpenAlertAfter != nil && *u.OpenAlertAfter > 0 {
		openAfter = u.OpenAlertAfter
	}
	tag, err := p.pool.Exec(ctx, `
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
		return Sensor{}, fmt.Errorf("updating sensor %s: %w", id, ErrNotFound)
	}
	return p.GetSensor(ctx, id)
}

// DeleteSensor removes the sensor and its links to clients. Its recorded state and
// history stay.
func (p *Postgres) DeleteSensor(ctx context.Context, id string) error {
	tag, err := p.pool.Exec(ctx, `DELETE FROM sensors WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("deleting sensor %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("deleting sensor %s: %w", id, ErrNotFound)
	}
	return nil
}

// SensorsByID returns the registered sensors among ids, ordered by id; ids that are
// not registered are left out.
func (p *Postgres) SensorsByID(ctx context.Context, ids []string) ([]Sensor, error) {
	rows, err := p.pool.Query(ctx, `SELECT `+sensorColumns+` `+sensorFrom+` WHERE s.id = ANY($1) ORDER BY s.id`, ids)
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
func (p *Postgres) CreateSensors(ctx context.Context, ids []string, address string) error {
	_, err := p.pool.Exec(ctx, `
		INSERT INTO sensors (id, address) SELECT id, $2 FROM unnest($1::text[]) AS id
		ON CONFLICT (id) DO NOTHING`, ids, address)
	if err != nil {
		return fmt.Errorf("creating %d sensors: %w", len(ids), err)
	}
	return nil
}
