package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lockstream/lockstream/domain"
)

// UnregisteredCount is one id of a consumer process's summary of the
// unregistered sensor ids it saw in an hour.
type UnregisteredCount struct {
	SensorID string
	// Count over-estimates the readings by at most CountError.
	Count, CountError int64
	LastSeen          time.Time
}

// ReplaceUnregistered replaces the summary of (hour, process) with counts and
// deletes every summary of an hour before expired, in one transaction of two
// statements: a flush costs the same whatever the summary holds.
func (p *PostgresStore) ReplaceUnregistered(ctx context.Context, hour time.Time, process string,
	counts []UnregisteredCount, expired time.Time) error {
	ids := make([]string, len(counts))
	cnt := make([]int64, len(counts))
	errs := make([]int64, len(counts))
	seen := make([]time.Time, len(counts))
	for i, c := range counts {
		ids[i], cnt[i], errs[i], seen[i] = c.SensorID, c.Count, c.CountError, c.LastSeen
	}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			DELETE FROM unregistered_sightings WHERE (hour = $1 AND process = $2) OR hour < $3`,
			hour, process, expired); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO unregistered_sightings (hour, process, sensor_id, count, count_error, last_seen)
			SELECT $1, $2, * FROM unnest($3::text[], $4::bigint[], $5::bigint[], $6::timestamptz[])`,
			hour, process, ids, cnt, errs, seen)
		return err
	})
	if err != nil {
		return fmt.Errorf("replacing the unregistered sensors of %s at %s: %w", process, hour.Format(time.RFC3339), err)
	}
	return nil
}

// UnregisteredSensor is domain.UnregisteredSensor: the API shows them.
type UnregisteredSensor = domain.UnregisteredSensor

// TopUnregistered returns the ids seen most in the summaries of the hours from
// since on, at most limit, most first, leaving out ids registered meanwhile.
func (p *PostgresStore) TopUnregistered(ctx context.Context, since time.Time, limit int) ([]UnregisteredSensor, error) {
	rows, err := p.pool.Query(ctx, `
		SELECT u.sensor_id, sum(u.count)::bigint, sum(u.count - u.count_error)::bigint, max(u.last_seen)
		FROM unregistered_sightings u
		WHERE u.hour >= date_trunc('hour', $1::timestamptz)
		  AND NOT EXISTS (SELECT 1 FROM sensors s WHERE s.id = u.sensor_id)
		GROUP BY u.sensor_id
		ORDER BY 2 DESC, 1
		LIMIT $2`, since, limit)
	if err != nil {
		return nil, fmt.Errorf("listing unregistered sensors: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (UnregisteredSensor, error) {
		var u UnregisteredSensor
		err := row.Scan(&u.SensorID, &u.Count, &u.MinCount, &u.LastSeen)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing unregistered sensors: %w", err)
	}
	return out, nil
}
