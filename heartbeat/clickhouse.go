package heartbeat

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/lockstream/lockstream/storage"
)

// ClickHouseStore reads what a rebuild of the heartbeat sets needs from the
// history: each sensor's last reading and its open losses.
type ClickHouseStore struct {
	conn driver.Conn
}

// NewClickHouseStore returns the heartbeat's reads on c's connection.
func NewClickHouseStore(c *storage.ClickHouse) *ClickHouseStore {
	return &ClickHouseStore{conn: c.Conn()}
}

// EachLastReading calls fn with every sensor's latest reading time (server receive
// time, whole seconds) in the history. An error from fn stops the walk and is
// returned.
func (c *ClickHouseStore) EachLastReading(ctx context.Context, fn func(sensorID string, receivedAt time.Time) error) error {
	return c.eachSensorTime(ctx, "last readings",
		`SELECT sensor_id, max(received_at) FROM readings GROUP BY sensor_id`, fn)
}

// EachOpenLoss calls fn for every sensor whose latest connection event in the history
// is a connection_lost, with that event's time (the deadline the sensor missed). An
// error from fn stops the walk and is returned.
func (c *ClickHouseStore) EachOpenLoss(ctx context.Context, fn func(sensorID string, lostAt time.Time) error) error {
	return c.eachSensorTime(ctx, "open connection losses", `
		SELECT sensor_id, max(at)
		FROM events
		WHERE type IN ('connection_lost', 'connection_restored')
		GROUP BY sensor_id
		HAVING argMax(type, at) = 'connection_lost'`, fn)
}

// eachSensorTime runs query, whose rows are (sensor id, time), and calls fn for each
// row; what names the rows in errors.
func (c *ClickHouseStore) eachSensorTime(ctx context.Context, what, query string, fn func(string, time.Time) error) error {
	rows, err := c.conn.Query(ctx, query)
	if err != nil {
		return fmt.Errorf("querying %s: %w", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id string
			at time.Time
		)
		if err := rows.Scan(&id, &at); err != nil {
			return fmt.Errorf("scanning %s: %w", what, err)
		}
		if err := fn(id, at.UTC()); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("querying %s: %w", what, err)
	}
	return nil
}
