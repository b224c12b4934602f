package history

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/lockstream/lockstream/storage"
)

// ClickHouseStore holds the history writer's statements: batch inserts of
// readings and events, each naming its columns (the only INSERT path that
// works on ClickHouse 18.16).
type ClickHouseStore struct {
	conn driver.Conn
}

// NewClickHouseStore returns the history's store on c's connection.
func NewClickHouseStore(c *storage.ClickHouse) *ClickHouseStore {
	return &ClickHouseStore{conn: c.Conn()}
}

// InsertReadings writes rows into readings in one batch. ClickHouse keeps
// seconds: times are truncated.
func (c *ClickHouseStore) InsertReadings(ctx context.Context, rows []storage.HistoryReading) error {
	if len(rows) == 0 {
		return nil
	}
	// The batch API is the only INSERT path that works on ClickHouse 18.16.
	// Whole columns are appended at once: a row at a time costs the client a
	// type switch and conversion per value.
	var (
		ids        = make([]string, len(rows))
		data       = make([]uint8, len(rows))
		ts         = make([]time.Time, len(rows))
		receivedAt = make([]time.Time, len(rows))
		partitions = make([]int32, len(rows))
		offsets    = make([]int64, len(rows))
		epoch      = time.Unix(0, 0)
	)
	for i, r := range rows {
		ids[i], data[i], ts[i], receivedAt[i], partitions[i], offsets[i] =
			r.SensorID, uint8(r.Data), r.TS, r.ReceivedAt, r.Partition, r.Offset
		if r.TS.IsZero() {
			ts[i] = epoch
		}
	}
	return c.insertColumns(ctx, "readings",
		`INSERT INTO readings (sensor_id, data, ts, received_at, kafka_partition, kafka_offset)`,
		len(rows), ids, data, ts, receivedAt, partitions, offsets)
}

// InsertEvents writes rows into events in one batch. Replays are harmless: the
// table collapses rows with the same id.
func (c *ClickHouseStore) InsertEvents(ctx context.Context, rows []storage.HistoryEvent) error {
	if len(rows) == 0 {
		return nil
	}
	var (
		ids, types, sensors = make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows))
		data, previous      = make([]*int8, len(rows)), make([]*int8, len(rows))
		at                  = make([]time.Time, len(rows))
	)
	for i, e := range rows {
		ids[i], types[i], sensors[i], data[i], previous[i], at[i] =
			e.ID, e.Type, e.SensorID, int8Ptr(e.Data), int8Ptr(e.Previous), e.At
	}
	return c.insertColumns(ctx, "events", `INSERT INTO events (id, type, sensor_id, data, previous, at)`,
		len(rows), ids, types, sensors, data, previous, at)
}

// insertColumns sends one batch of rows rows to table, a slice per column in
// the order of the insert's column list.
func (c *ClickHouseStore) insertColumns(ctx context.Context, table, insert string, rows int, columns ...any) error {
	batch, err := c.conn.PrepareBatch(ctx, insert)
	if err != nil {
		return fmt.Errorf("preparing %s insert: %w", table, err)
	}
	defer func() { _ = batch.Abort() }()
	for i, values := range columns {
		if err := batch.Column(i).Append(values); err != nil {
			return fmt.Errorf("appending column %d of %s: %w", i, table, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("inserting %d rows into %s: %w", rows, table, err)
	}
	return nil
}

func int8Ptr(v *int) *int8 {
	if v == nil {
		return nil
	}
	i := int8(*v)
	return &i
}
