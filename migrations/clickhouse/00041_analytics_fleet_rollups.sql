-- Fleet-wide rollups (package analytics): the same sums as events_hourly and
-- readings_hourly per UTC hour, over every sensor history holds, so that
-- scope=fleet reads one row an hour instead of one per sensor and hour (the
-- fleet benchmark's 100,000 sensors report about once an hour each, so the
-- per-sensor rollups are nearly as large as the raw tables). Filled by
-- materialized views on the raw tables, backfilled like 00040.
CREATE TABLE IF NOT EXISTS fleet_readings_hourly (
    hour     DateTime,
    readings UInt64
) ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY hour;

CREATE TABLE IF NOT EXISTS fleet_events_hourly (
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
ORDER BY hour;

INSERT INTO fleet_readings_hourly (hour, readings)
SELECT toDateTime(intDiv(toUInt32(received_at), 3600) * 3600) AS hour, count() AS readings
FROM readings FINAL
WHERE (SELECT count() FROM fleet_readings_hourly) = 0
GROUP BY hour;

INSERT INTO fleet_events_hourly (hour, changes, unlocks, unlocked_n, unlocked_t, losses, restores, lost_n, lost_t)
SELECT toDateTime(intDiv(toUInt32(at), 3600) * 3600) AS hour,
    countIf(type = 'state_changed') AS changes,
    countIf(type = 'state_changed' AND ifNull(data, 1) = 0) AS unlocks,
    sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed') AS unlocked_n,
    sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed') AS unlocked_t,
    countIf(type = 'connection_lost') AS losses,
    countIf(type = 'connection_restored') AS restores,
    sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored')) AS lost_n,
    sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored')) AS lost_t
FROM events FINAL
WHERE (SELECT count() FROM fleet_events_hourly) = 0
GROUP BY hour;

CREATE MATERIALIZED VIEW IF NOT EXISTS fleet_readings_hourly_mv TO fleet_readings_hourly AS
SELECT toDateTime(intDiv(toUInt32(received_at), 3600) * 3600) AS hour, count() AS readings
FROM readings
GROUP BY hour;

CREATE MATERIALIZED VIEW IF NOT EXISTS fleet_events_hourly_mv TO fleet_events_hourly AS
SELECT toDateTime(intDiv(toUInt32(at), 3600) * 3600) AS hour,
    countIf(type = 'state_changed') AS changes,
    countIf(type = 'state_changed' AND ifNull(data, 1) = 0) AS unlocks,
    sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed') AS unlocked_n,
    sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed') AS unlocked_t,
    countIf(type = 'connection_lost') AS losses,
    countIf(type = 'connection_restored') AS restores,
    sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored')) AS lost_n,
    sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored')) AS lost_t
FROM events
GROUP BY hour;
