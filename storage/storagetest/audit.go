package storagetest

import (
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lockstream/lockstream/storage"
)

// These read whole tables, which only tests do: they are here, not in storage,
// so production code cannot call them by accident.

const auditTimeout = 60 * time.Second

// SensorState is one row of sensor_state as the audits read it: the state and
// the position in the readings topic of the reading that last changed it.
type SensorState struct {
	SensorID  string
	Data      int
	ChangedAt time.Time
	TopicID   [16]byte
	Partition int32
	Offset    int64
}

// AllSensorStates returns every row of sensor_state of the Postgres database at
// pgURL, ordered by sensor id.
func AllSensorStates(t testing.TB, pgURL string) []SensorState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatalf("reading all sensor states: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
		SELECT sensor_id, data, changed_at, source_topic_id, source_partition, source_offset
		FROM sensor_state ORDER BY sensor_id`)
	if err != nil {
		t.Fatalf("reading all sensor states: %v", err)
	}
	defer rows.Close()
	var out []SensorState
	for rows.Next() {
		var (
			s     SensorState
			data  int16
			topic pgtype.UUID
		)
		if err := rows.Scan(&s.SensorID, &data, &s.ChangedAt, &topic, &s.Partition, &s.Offset); err != nil {
			t.Fatalf("reading all sensor states: %v", err)
		}
		s.Data, s.TopicID = int(data), topic.Bytes
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading all sensor states: %v", err)
	}
	return out
}

// AnalyzeOutbox refreshes the planner statistics of the outbox tables of the
// Postgres database at pgURL. Right after a bulk load, before autovacuum's next
// look (up to a minute), the planner believes the tables nearly empty and plans
// a claim as a sort of every due delivery (about 70 ms per claim at 20,000 due)
// instead of a walk of the due index that stops at the limit (well under 1 ms);
// benchmarks call this after seeding so they measure the steady state.
func AnalyzeOutbox(t testing.TB, pgURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatalf("analyzing the outbox: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `ANALYZE deliveries, notifications`); err != nil {
		t.Fatalf("analyzing the outbox: %v", err)
	}
}

// openClickHouse connects to the ClickHouse database at chURL for t.
func openClickHouse(t testing.TB, ctx context.Context, chURL string) clickhouse.Conn {
	t.Helper()
	opts, err := clickhouse.ParseDSN(chURL)
	if err != nil {
		t.Fatalf("clickhouse URL: %v", err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatalf("opening clickhouse: %v", err)
	}
	if err := conn.Ping(ctx); err != nil {
		_ = conn.Close()
		t.Fatalf("reaching clickhouse: %v", err)
	}
	return conn
}

// AllReadings returns every reading of the ClickHouse database at chURL after
// deduplication (SELECT … FINAL), ordered by partition and offset.
func AllReadings(t testing.TB, chURL string) []storage.HistoryReading {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	conn := openClickHouse(t, ctx, chURL)
	defer conn.Close()
	rows, err := conn.Query(ctx, `
		SELECT sensor_id, data, ts, received_at, kafka_partition, kafka_offset
		FROM readings FINAL ORDER BY kafka_partition, kafka_offset`)
	if err != nil {
		t.Fatalf("reading all readings: %v", err)
	}
	defer rows.Close()
	var out []storage.HistoryReading
	for rows.Next() {
		var (
			r    storage.HistoryReading
			data uint8
		)
		if err := rows.Scan(&r.SensorID, &data, &r.TS, &r.ReceivedAt, &r.Partition, &r.Offset); err != nil {
			t.Fatalf("reading all readings: %v", err)
		}
		r.Data = int(data)
		if r.TS.Unix() == 0 {
			r.TS = time.Time{}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading all readings: %v", err)
	}
	return out
}

// AllEvents returns every event of the ClickHouse database at chURL after
// deduplication (SELECT … FINAL), ordered by sensor, time and id.
func AllEvents(t testing.TB, chURL string) []storage.HistoryEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	conn := openClickHouse(t, ctx, chURL)
	defer conn.Close()
	rows, err := conn.Query(ctx, `
		SELECT id, type, sensor_id, data, previous, at FROM events FINAL ORDER BY sensor_id, at, id`)
	if err != nil {
		t.Fatalf("reading all events: %v", err)
	}
	defer rows.Close()
	var out []storage.HistoryEvent
	for rows.Next() {
		var (
			e              storage.HistoryEvent
			data, previous *int8
		)
		if err := rows.Scan(&e.ID, &e.Type, &e.SensorID, &data, &previous, &e.At); err != nil {
			t.Fatalf("reading all events: %v", err)
		}
		e.Data, e.Previous = intPtr(data), intPtr(previous)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading all events: %v", err)
	}
	return out
}

func intPtr(v *int8) *int {
	if v == nil {
		return nil
	}
	i := int(*v)
	return &i
}

// CreateSensors registers sensors ids (address "test") in the Postgres database
// at pgURL, in one statement.
func CreateSensors(t testing.TB, pgURL string, ids ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatalf("registering sensors: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO sensors (id, address) SELECT id, 'test' FROM unnest($1::text[]) AS id`, ids); err != nil {
		t.Fatalf("registering %d sensors: %v", len(ids), err)
	}
}
