-- Time-first rollups for rankings (package analytics, docs/DESIGN.md
-- "Analytics", levels). events_hourly is ordered by sensor first, so a top
-- list over a time range cannot skip its granules: it read its month
-- partitions whole, and every row before the range for the carry-in. These
-- hold the same event sums per sensor and per UTC hour, UTC day and 30-day
-- span (unix seconds / 2,592,000: integer arithmetic, so that the server's
-- time zone cannot shift them), ordered by time first, so that a range reads
-- its own rows only and a prefix (everything before a time) reads one row per
-- sensor and span. A ranking is then a difference of two prefixes, each made
-- of a few spans, days and hours (analytics.levelPlan).
--
-- Each is filled by a view on the raw events table: views on a view's target
-- table are not run on 18.16, so no level is fed from another. A replayed
-- batch is summed twice here as in 00040: a level's span is trusted only when
-- rollup_level_seals says SealRollups made it equal to the raw rows after the
-- last insert touched it (history_touched, 00055). Works on ClickHouse 18.16
-- and current releases.
CREATE TABLE IF NOT EXISTS events_level_hour (
    start      DateTime,
    sensor_id  String,
    changes    Int64,
    unlocks    Int64,
    unlocked_n Int64,
    unlocked_t Int64,
    losses     Int64,
    lost_n     Int64,
    lost_t     Int64
) ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(start)
ORDER BY (start, sensor_id);

CREATE TABLE IF NOT EXISTS events_level_day (
    start      DateTime,
    sensor_id  String,
    changes    Int64,
    unlocks    Int64,
    unlocked_n Int64,
    unlocked_t Int64,
    losses     Int64,
    lost_n     Int64,
    lost_t     Int64
) ENGINE = SummingMergeTree
PARTITION BY toYYYYMM(start)
ORDER BY (start, sensor_id);

CREATE TABLE IF NOT EXISTS events_level_span (
    start      DateTime,
    sensor_id  String,
    changes    Int64,
    unlocks    Int64,
    unlocked_n Int64,
    unlocked_t Int64,
    losses     Int64,
    lost_n     Int64,
    lost_t     Int64
) ENGINE = SummingMergeTree
PARTITION BY toYear(start)
ORDER BY (start, sensor_id);

-- width is the level's seconds (3600, 86400, 2592000); start the bucket's.
CREATE TABLE IF NOT EXISTS rollup_level_seals (
    width     UInt32,
    start     DateTime,
    sealed_at DateTime
) ENGINE = ReplacingMergeTree(sealed_at)
PARTITION BY width
ORDER BY (width, start);

-- Backfill, from the per-sensor hourly rollup (as large as the raw events at
-- fleet density, but no FINAL), when the level is empty (a re-run after a
-- failure). The copies the hourly rollup may hold (replays) are corrected by
-- the first seals, which compare every level with the raw rows.
INSERT INTO events_level_hour (start, sensor_id, changes, unlocks, unlocked_n, unlocked_t, losses, lost_n, lost_t)
SELECT hour, sensor_id, toInt64(sum(changes)), toInt64(sum(unlocks)), sum(unlocked_n), sum(unlocked_t),
    toInt64(sum(losses)), sum(lost_n), sum(lost_t)
FROM events_hourly
WHERE (SELECT count() FROM events_level_hour) = 0
GROUP BY hour, sensor_id;

INSERT INTO events_level_day (start, sensor_id, changes, unlocks, unlocked_n, unlocked_t, losses, lost_n, lost_t)
SELECT toDateTime(intDiv(toUInt32(hour), 86400) * 86400) AS day, sensor_id, toInt64(sum(changes)), toInt64(sum(unlocks)),
    sum(unlocked_n), sum(unlocked_t), toInt64(sum(losses)), sum(lost_n), sum(lost_t)
FROM events_hourly
WHERE (SELECT count() FROM events_level_day) = 0
GROUP BY day, sensor_id;

INSERT INTO events_level_span (start, sensor_id, changes, unlocks, unlocked_n, unlocked_t, losses, lost_n, lost_t)
SELECT toDateTime(intDiv(toUInt32(hour), 2592000) * 2592000) AS span, sensor_id, toInt64(sum(changes)), toInt64(sum(unlocks)),
    sum(unlocked_n), sum(unlocked_t), toInt64(sum(losses)), sum(lost_n), sum(lost_t)
FROM events_hourly
WHERE (SELECT count() FROM events_level_span) = 0
GROUP BY span, sensor_id;

-- The views. A row inserted between the backfill and its view is missing
-- from the level, but it touched its hour after every seal (there is none
-- yet): the first seals add it before any query trusts its bucket.
CREATE MATERIALIZED VIEW IF NOT EXISTS events_level_hour_mv TO events_level_hour AS
SELECT toDateTime(intDiv(toUInt32(at), 3600) * 3600) AS start, sensor_id,
    toInt64(countIf(type = 'state_changed')) AS changes,
    toInt64(countIf(type = 'state_changed' AND ifNull(data, 1) = 0)) AS unlocks,
    toInt64(sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed')) AS unlocked_n,
    toInt64(sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed')) AS unlocked_t,
    toInt64(countIf(type = 'connection_lost')) AS losses,
    toInt64(sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored'))) AS lost_n,
    toInt64(sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored'))) AS lost_t
FROM events
GROUP BY start, sensor_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS events_level_day_mv TO events_level_day AS
SELECT toDateTime(intDiv(toUInt32(at), 86400) * 86400) AS start, sensor_id,
    toInt64(countIf(type = 'state_changed')) AS changes,
    toInt64(countIf(type = 'state_changed' AND ifNull(data, 1) = 0)) AS unlocks,
    toInt64(sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed')) AS unlocked_n,
    toInt64(sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed')) AS unlocked_t,
    toInt64(countIf(type = 'connection_lost')) AS losses,
    toInt64(sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored'))) AS lost_n,
    toInt64(sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored'))) AS lost_t
FROM events
GROUP BY start, sensor_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS events_level_span_mv TO events_level_span AS
SELECT toDateTime(intDiv(toUInt32(at), 2592000) * 2592000) AS start, sensor_id,
    toInt64(countIf(type = 'state_changed')) AS changes,
    toInt64(countIf(type = 'state_changed' AND ifNull(data, 1) = 0)) AS unlocks,
    toInt64(sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed')) AS unlocked_n,
    toInt64(sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed')) AS unlocked_t,
    toInt64(countIf(type = 'connection_lost')) AS losses,
    toInt64(sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored'))) AS lost_n,
    toInt64(sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored'))) AS lost_t
FROM events
GROUP BY start, sensor_id;
