package heartbeat

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockstream/lockstream/storage"
)

// PostgresStore holds the heartbeat's statements on Postgres: what it reads of
// the registry (timeouts, sites, states), and the site outages, openings,
// streaks and maintenance windows it keeps. Every statement that judges time
// takes it from the caller's clock.
type PostgresStore struct {
	pool *pgxpool.Pool
}

// NewPostgresStore returns the heartbeat's store on p's pool.
func NewPostgresStore(p *storage.Postgres) *PostgresStore {
	return &PostgresStore{pool: p.Pool()}
}

// RegisteredSensor is what the heartbeat needs to know about a registered sensor to
// rebuild its deadline.
type RegisteredSensor struct {
	// ID names the sensor.
	ID string
	// CreatedAt is its registration: its last sighting until it reports.
	CreatedAt time.Time
	// Timeout overrides the fleet-wide heartbeat timeout when non-zero.
	Timeout time.Duration
}

// HeartbeatTimeouts returns every sensor's heartbeat timeout override; sensors without
// one use the fleet-wide default and are left out, so the map stays small.
func (p *PostgresStore) HeartbeatTimeouts(ctx context.Context) (map[string]time.Duration, error) {
	rows, err := p.pool.Query(ctx, `SELECT id, heartbeat_timeout FROM sensors WHERE heartbeat_timeout IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("loading heartbeat timeouts: %w", err)
	}
	defer rows.Close()
	timeouts := make(map[string]time.Duration)
	for rows.Next() {
		var (
			id      string
			timeout time.Duration
		)
		if err := rows.Scan(&id, &timeout); err != nil {
			return nil, fmt.Errorf("loading heartbeat timeouts: %w", err)
		}
		timeouts[id] = timeout
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("loading heartbeat timeouts: %w", err)
	}
	return timeouts, nil
}

// EachHeartbeatSensor calls fn for every registered sensor, streaming the rows so a
// fleet of millions is not held in memory twice. An error from fn stops the walk and
// is returned.
func (p *PostgresStore) EachHeartbeatSensor(ctx context.Context, fn func(RegisteredSensor) error) error {
	rows, err := p.pool.Query(ctx, `SELECT id, created_at, heartbeat_timeout FROM sensors`)
	if err != nil {
		return fmt.Errorf("listing sensors for the heartbeat: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			s       RegisteredSensor
			timeout *time.Duration
		)
		if err := rows.Scan(&s.ID, &s.CreatedAt, &timeout); err != nil {
			return fmt.Errorf("listing sensors for the heartbeat: %w", err)
		}
		if timeout != nil {
			s.Timeout = *timeout
		}
		if err := fn(s); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("listing sensors for the heartbeat: %w", err)
	}
	return nil
}

// HeartbeatTimeout returns the sensor's heartbeat timeout override, 0 when it
// uses the fleet's; a sensor that is not registered is storage.ErrNotFound.
func (p *PostgresStore) HeartbeatTimeout(ctx context.Context, sensorID string) (time.Duration, error) {
	var timeout *time.Duration
	if err := p.pool.QueryRow(ctx, `SELECT heartbeat_timeout FROM sensors WHERE id = $1`, sensorID).Scan(&timeout); err != nil {
		return 0, fmt.Errorf("reading the heartbeat timeout of %s: %w", sensorID, storage.MapError(err))
	}
	if timeout == nil {
		return 0, nil
	}
	return *timeout, nil
}
