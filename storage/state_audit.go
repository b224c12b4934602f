package storage

import (
	"context"
	"fmt"
)

// AllSensorStates returns every row of sensor_state, ordered by sensor id. It reads
// the whole table: for tests and audits of small databases, not for serving.
func (p *Postgres) AllSensorStates(ctx context.Context) ([]StateChange, error) {
	rows, err := p.pool.Query(ctx, `
		SELECT sensor_id, data, changed_at, source_partition, source_offset
		FROM sensor_state ORDER BY sensor_id`)
	if err != nil {
		return nil, fmt.Errorf("reading all sensor states: %w", err)
	}
	defer rows.Close()
	var out []StateChange
	for rows.Next() {
		var (
			s    StateChange
			data int16
		)
		if err := rows.Scan(&s.SensorID, &data, &s.ChangedAt, &s.Partition, &s.Offset); err != nil {
			return nil, fmt.Errorf("reading all sensor states: %w", err)
		}
		s.Data = int(data)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading all sensor states: %w", err)
	}
	return out, nil
}
