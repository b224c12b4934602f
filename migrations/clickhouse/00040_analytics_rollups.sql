-- Rollups for analysts (package analytics): per sensor and UTC hour, filled by
-- materialized views on every insert into readings and events, so the history
-- writer knows nothing of them. Works on ClickHouse 18.16 and current releases:
-- SummingMergeTree, MATERIALIZED VIEW … TO, no TTL, partitioned by month like
-- the raw tables so that old months drop whole.
--
-- Time in a state is linear in the changes: over [a, b) a sensor spends
-- state_before_a·(b−a) + Σ δ·(b−t) in it, δ = +1 when it enters the state at t,
-- −1 when it leaves. So a rollup keeps, per kind, Σ δ (…_n) and Σ δ·t (…_t, t
-- in unix seconds): Σ δ·(b−t) = b·Σ δ − Σ δ·t for any b, and state_before_a is
-- Σ δ before a. Hours are UTC hours computed from unix seconds, not
-- toStartOfHour, so that the server's time zone cannot shift them.
--
-- unlocked: δ = u(data) − u(previous), u(0) = 1 (unlocked), u(1) = u(NULL) = 0:
-- a first reading (previous NULL) that is 0 enters the unlocked state.
-- lost: δ = +1 for connection_lost, −1 for connection_restored.
--
-- A row inserted twice (the history writer is at-least-once; the raw tables
-- collapse copies, FINAL) is summed twice here: analytics.RebuildRollups
-- recomputes months from the raw tables, FINAL, when that matters.
CREATE TABLE IF NOT EXISTS readings_hourly (
    sensor_id String,
    hour      DateTime,
    readings  UInt64
) ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (sensor_id, hour);

CREATE TABLE IF NOT EXISTS events_hourly (
    sensor_id  String,
    hour       DateTime,
    changes    UInt64,
    unlocks    UInt64,
    unlocked_n Int64,
    unlocked_t Int64,
    losses     UInt64,
    restores   UInt64,
    lost_n     Int64,
    lost_t     Int64
) ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (sensor_id, hour);

-- Backfill: what the raw tables held before the views existed. Rows the
-- history writer inserts between these and the views' creation are missed by
-- the rollups (migrate before starting the writer, as deploy does; or rebuild
-- the month with analytics.RebuildRollups).
INSERT INTO readings_hourly (sensor_id, hour, readings)
SELECT sensor_id, toDateTime(intDiv(toUInt32(received_at), 3600) * 3600) AS hour, count() AS readings
FROM readings FINAL
WHERE (SELECT count() FROM readings_hourly) = 0
GROUP BY sensor_id, hour;

INSERT INTO events_hourly (sensor_id, hour, changes, unlocks, unlocked_n, unlocked_t, losses, restores, lost_n, lost_t)
SELECT sensor_id, toDateTime(intDiv(toUInt32(at), 3600) * 3600) AS hour,
    countIf(type = 'state_changed') AS changes,
    countIf(type = 'state_changed' AND ifNull(data, 1) = 0) AS unlocks,
    sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed') AS unlocked_n,
    sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed') AS unlocked_t,
    countIf(type = 'connection_lost') AS losses,
    countIf(type = 'connection_restored') AS restores,
    sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored')) AS lost_n,
    sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored')) AS lost_t
FROM events FINAL
WHERE (SELECT count() FROM events_hourly) = 0
GROUP BY sensor_id, hour;

CREATE MATERIALIZED VIEW IF NOT EXISTS readings_hourly_mv TO readings_hourly AS
SELECT sensor_id, toDateTime(intDiv(toUInt32(received_at), 3600) * 3600) AS hour, count() AS readings
FROM readings
GROUP BY sensor_id, hour;

CREATE MATERIALIZED VIEW IF NOT EXISTS events_hourly_mv TO events_hourly AS
SELECT sensor_id, toDateTime(intDiv(toUInt32(at), 3600) * 3600) AS hour,
    countIf(type = 'state_changed') AS changes,
    countIf(type = 'state_changed' AND ifNull(data, 1) = 0) AS unlocks,
    sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed') AS unlocked_n,
    sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed') AS unlocked_t,
    countIf(type = 'connection_lost') AS losses,
    countIf(type = 'connection_restored') AS restores,
    sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored')) AS lost_n,
    sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored')) AS lost_t
FROM events
GROUP BY sensor_id, hour;
