package storage

import (
	"context"
	"fmt"
	"time"
)

// HeartbeatSensor is what the heartbeat needs to know about a registered sensor to
// rebuild its deadline.
type HeartbeatSensor struct {
	// ID names the sensor.
	ID string
	// CreatedAt is its registration: its last sighting until it reports.
	CreatedAt time.Time
	// Timeout overrides the fleet-wide heartbeat timeout when non-zero.
	Timeout time.Duration
}

// HeartbeatTimeouts returns every sensor's heartbeat timeout override; sensors without
// one use the fleet-wide default and are left out, so the map stays small.
func (p *Postgres) HeartbeatTimeouts(ctx context.Context) (map[string]time.Duration, error) {
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
func (p *Postgres) EachHeartbeatSensor(ctx context.Context, fn func(HeartbeatSensor) error) error {
	rows, err := p.pool.Query(ctx, `SELECT id, created_at, heartbeat_timeout FROM sensors`)
	if err != nil {
		return fmt.Errorf("listing sensors for the heartbeat: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			s       HeartbeatSensor
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
