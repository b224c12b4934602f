package storage

import (
	"context"
	"fmt"
	"time"
)

// SensorEvents returns the events of sensorID with from <= at < to, newest first,
// at most limit of them. Replays are collapsed (SELECT … FINAL): an event id
// appears once even before ClickHouse merged its copies. ClickHouse keeps seconds,
// so from and to are truncated to the second.
func (c *ClickHouse) SensorEvents(ctx context.Context, sensorID string, from, to time.Time, limit int) ([]HistoryEvent, error) {
	if limit <= 0 {
		return nil, nil
	}
	// Times are bound as unix seconds: toDateTime(<integer>) means the same instant
	// whatever the server's timezone, on 18.16 and on current releases.
	rows, err := c.conn.Query(ctx, `
		SELECT id, type, sensor_id, data, previous, at
		FROM events FINAL
		WHERE sensor_id = ? AND at >= toDateTime(?) AND at < toDateTime(?)
		ORDER BY at DESC, id DESC
		LIMIT ?`, sensorID, from.Unix(), to.Unix(), limit)
	if err != nil {
		return nil, fmt.Errorf("querying events of sensor %s: %w", sensorID, unreachable(storeClickHouse, err))
	}
	defer rows.Close()
	var out []HistoryEvent
	for rows.Next() {
		var (
			e              HistoryEvent
			data, previous *int8
		)
		if err := rows.Scan(&e.ID, &e.Type, &e.SensorID, &data, &previous, &e.At); err != nil {
			return nil, fmt.Errorf("reading events of sensor %s: %w", sensorID, err)
		}
		e.Data, e.Previous = intPtr(data), intPtr(previous)
		e.At = e.At.UTC()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading events of sensor %s: %w", sensorID, unreachable(storeClickHouse, err))
	}
	return out, nil
}

// SensorReadings returns the readings of sensorID received (server time) in
// from <= received_at < to, newest first, at most limit of them. Replays are
// collapsed (SELECT … FINAL); readings received in the same second are ordered by
// their Kafka partition and offset, newest offset first. A reading without device
// time has a zero TS. from and to are truncated to the second.
func (c *ClickHouse) SensorReadings(ctx context.Context, sensorID string, from, to time.Time, limit int) ([]HistoryReading, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := c.conn.Query(ctx, `
		SELECT sensor_id, data, ts, received_at, kafka_partition, kafka_offset
		FROM readings FINAL
		WHERE sensor_id = ? AND received_at >= toDateTime(?) AND received_at < toDateTime(?)
		ORDER BY received_at DESC, kafka_partition DESC, kafka_offset DESC
		LIMIT ?`, sensorID, from.Unix(), to.Unix(), limit)
	if err != nil {
		return nil, fmt.Errorf("querying readings of sensor %s: %w", sensorID, unreachable(storeClickHouse, err))
	}
	defer rows.Close()
	var out []HistoryReading
	for rows.Next() {
		var (
			r    HistoryReading
			data uint8
		)
		if err := rows.Scan(&r.SensorID, &data, &r.TS, &r.ReceivedAt, &r.Partition, &r.Offset); err != nil {
			return nil, fmt.Errorf("reading readings of sensor %s: %w", sensorID, err)
		}
		r.Data = int(data)
		// The column is not nullable; the epoch stands for "no device time".
		if r.TS.Unix() == 0 {
			r.TS = time.Time{}
		} else {
			r.TS = r.TS.UTC()
		}
		r.ReceivedAt = r.ReceivedAt.UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading readings of sensor %s: %w", sensorID, unreachable(storeClickHouse, err))
	}
	return out, nil
}
