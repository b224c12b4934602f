package heartbeat

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/storage"
)

// MaintenanceWindow is domain.MaintenanceWindow: the API sets it, the
// heartbeat keeps and ends it.
type MaintenanceWindow = domain.MaintenanceWindow

const maintenanceColumns = `id::text, coalesce(sensor_id, ''), coalesce(site, ''), starts_at, ends_at, silent, ended_at`

func collectWindows(rows pgx.Rows) ([]MaintenanceWindow, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (MaintenanceWindow, error) {
		var (
			w     MaintenanceWindow
			ended *time.Time
		)
		err := row.Scan(&w.ID, &w.SensorID, &w.Site, &w.From, &w.To, &w.Silent, &ended)
		if ended != nil {
			w.EndedAt = *ended
		}
		return w, err
	})
}

// SetMaintenance sets the window of w.SensorID or w.Site that has not ended
// yet, creating it if there is none (what it recorded as silent is kept), and
// returns it. A sensor that is not registered is ErrNotFound.
func (p *PostgresStore) SetMaintenance(ctx context.Context, w MaintenanceWindow) (MaintenanceWindow, error) {
	var sensor, site *string
	conflict := "(site) WHERE site IS NOT NULL AND ended_at IS NULL"
	if w.SensorID != "" {
		sensor, conflict = &w.SensorID, "(sensor_id) WHERE sensor_id IS NOT NULL AND ended_at IS NULL"
	} else {
		site = &w.Site
	}
	rows, err := p.pool.Query(ctx, `
		INSERT INTO maintenance_windows (id, sensor_id, site, starts_at, ends_at)
		SELECT $1, $2, $3, $4, $5
		WHERE $2::text IS NULL OR EXISTS (SELECT 1 FROM sensors WHERE id = $2)
		ON CONFLICT `+conflict+` DO UPDATE SET starts_at = excluded.starts_at, ends_at = excluded.ends_at
		RETURNING `+maintenanceColumns, uuid.Must(uuid.NewV7()).String(), sensor, site, w.From, w.To)
	if err != nil {
		return MaintenanceWindow{}, fmt.Errorf("setting a maintenance window: %w", storage.MapError(err))
	}
	out, err := collectWindows(rows)
	if err != nil {
		return MaintenanceWindow{}, fmt.Errorf("setting a maintenance window: %w", storage.MapError(err))
	}
	if len(out) == 0 {
		return MaintenanceWindow{}, fmt.Errorf("setting a maintenance window of sensor %s: %w", w.SensorID, storage.ErrNotFound)
	}
	return out[0], nil
}

// CoverByMaintenance returns, for each loss (sensor, its site, the deadline
// it missed) that falls in a window of its sensor or its site not ended yet,
// the window's id, and adds those sensors to the windows' silent lists — one
// statement whatever the number of losses. A window ended (or moved) by
// another statement while this one waited for its row covers nothing: the
// update rechecks the end and the bounds on the row as committed, and only
// the windows it updated are answered, so a loss is never silenced by a
// maintenance_ended already published without it; it is reported uncovered.
func (p *PostgresStore) CoverByMaintenance(ctx context.Context, sensors, sites []string, deadlines []time.Time) (map[string]string, error) {
	out := map[string]string{}
	if len(sensors) == 0 {
		return out, nil
	}
	rows, err := p.pool.Query(ctx, `
		WITH c AS (
			SELECT DISTINCT ON (x.sensor_id) x.sensor_id, w.id, x.at
			FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS x (sensor_id, site, at)
			JOIN maintenance_windows w ON w.ended_at IS NULL AND w.starts_at <= x.at AND x.at < w.ends_at
			 AND (w.sensor_id = x.sensor_id OR w.site = nullif(x.site, ''))
			ORDER BY x.sensor_id, w.sensor_id NULLS LAST
		), u AS (
			UPDATE maintenance_windows w
			SET silent = (SELECT array_agg(DISTINCT s ORDER BY s) FROM unnest(w.silent || g.ids) AS s)
			FROM (SELECT id, array_agg(sensor_id) AS ids, min(at) AS first_at, max(at) AS last_at FROM c GROUP BY id) g
			WHERE w.id = g.id AND w.ended_at IS NULL AND w.starts_at <= g.first_at AND g.last_at < w.ends_at
			RETURNING w.id
		)
		SELECT sensor_id, id::text FROM c WHERE id IN (SELECT id FROM u)`, sensors, sites, deadlines)
	if err != nil {
		return nil, fmt.Errorf("looking up the maintenance of %d losses: %w", len(sensors), err)
	}
	defer rows.Close()
	for rows.Next() {
		var sensor, id string
		if err := rows.Scan(&sensor, &id); err != nil {
			return nil, fmt.Errorf("looking up the maintenance of %d losses: %w", len(sensors), err)
		}
		out[sensor] = id
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("looking up the maintenance of %d losses: %w", len(sensors), err)
	}
	return out, nil
}

// EndMaintenance ends, at now, up to limit windows whose end is at or before
// cutoff, and returns those this call ended (of several heartbeats, one ends
// each): the caller publishes their maintenance_ended. cutoff is the
// watermark the heartbeat judges by; now, its clock, is what
// UnpublishedMaintenanceEnds later compares with.
func (p *PostgresStore) EndMaintenance(ctx context.Context, cutoff, now time.Time, limit int) ([]MaintenanceWindow, error) {
	rows, err := p.pool.Query(ctx, `
		WITH due AS (
			SELECT id FROM maintenance_windows WHERE ended_at IS NULL AND ends_at <= $1
			ORDER BY ends_at LIMIT $2 FOR UPDATE SKIP LOCKED
		)
		UPDATE maintenance_windows w SET ended_at = $3 FROM due WHERE w.id = due.id
		RETURNING `+maintenanceColumnsW, cutoff, limit, now)
	if err != nil {
		return nil, fmt.Errorf("ending maintenance windows: %w", err)
	}
	out, err := collectWindows(rows)
	if err != nil {
		return nil, fmt.Errorf("ending maintenance windows: %w", err)
	}
	return out, nil
}

const maintenanceColumnsW = `w.id::text, coalesce(w.sensor_id, ''), coalesce(w.site, ''), w.starts_at, w.ends_at, w.silent, w.ended_at`

// UnpublishedMaintenanceEnds returns up to limit windows ended before before
// whose maintenance_ended is not known to be on Kafka.
func (p *PostgresStore) UnpublishedMaintenanceEnds(ctx context.Context, before time.Time, limit int) ([]MaintenanceWindow, error) {
	rows, err := p.pool.Query(ctx, `
		SELECT `+maintenanceColumns+` FROM maintenance_windows
		WHERE ended_at < $1 AND ended_published_at IS NULL ORDER BY ended_at LIMIT $2`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("finding unpublished maintenance ends: %w", err)
	}
	out, err := collectWindows(rows)
	if err != nil {
		return nil, fmt.Errorf("finding unpublished maintenance ends: %w", err)
	}
	return out, nil
}

// MarkMaintenanceEndsPublished records that these windows' maintenance_ended
// are on Kafka at at.
func (p *PostgresStore) MarkMaintenanceEndsPublished(ctx context.Context, ids []string, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := p.pool.Exec(ctx, `
		UPDATE maintenance_windows SET ended_published_at = coalesce(ended_published_at, $2)
		WHERE id = ANY ($1::uuid[])`, ids, at); err != nil {
		return fmt.Errorf("marking %d maintenance ends published: %w", len(ids), err)
	}
	return nil
}
