-- History that analysts query. Works on ClickHouse 18.16 (Debian) and current
-- releases: DateTime, no TTL, custom partitioning by month so old months drop whole.

-- A replayed reading has the same Kafka partition, offset and timestamp, so it
-- collapses onto the first copy.
CREATE TABLE IF NOT EXISTS readings (
    sensor_id       String,
    data            UInt8,
    ts              DateTime,
    received_at     DateTime,
    kafka_partition Int32,
    kafka_offset    Int64
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(received_at)
ORDER BY (sensor_id, received_at, kafka_partition, kafka_offset);

-- An event's id is deterministic, so a replayed event collapses onto the first copy.
CREATE TABLE IF NOT EXISTS events (
    id        String,
    type      String,
    sensor_id String,
    data      Nullable(Int8),
    previous  Nullable(Int8),
    at        DateTime
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(at)
ORDER BY (sensor_id, at, id);
