-- A fourth time-first level (package analytics, docs/DESIGN.md "Analytics",
-- levels): per sensor and 6-day block (unix seconds / 518,400; five to a
-- span of 00057, six days each). A span still in progress is never sealed,
-- so a prefix inside it was made of up to 29 days; blocks make it at most 4
-- blocks and 3 days. Filled and backfilled like the levels of 00057 (an
-- insert between the backfill and the view is added by the first seal).
-- Works on ClickHouse 18.16 and current releases.
CREATE TABLE IF NOT EXISTS events_level_block (
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

INSERT INTO events_level_block (start, sensor_id, changes, unlocks, unlocked_n, unlocked_t, losses, lost_n, lost_t)
SELECT toDateTime(intDiv(toUInt32(hour), 518400) * 518400) AS block, sensor_id, toInt64(sum(changes)), toInt64(sum(unlocks)),
    sum(unlocked_n), sum(unlocked_t), toInt64(sum(losses)), sum(lost_n), sum(lost_t)
FROM events_hourly
WHERE (SELECT count() FROM events_level_block) = 0
GROUP BY block, sensor_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS events_level_block_mv TO events_level_block AS
SELECT toDateTime(intDiv(toUInt32(at), 518400) * 518400) AS start, sensor_id,
    toInt64(countIf(type = 'state_changed')) AS changes,
    toInt64(countIf(type = 'state_changed' AND ifNull(data, 1) = 0)) AS unlocks,
    toInt64(sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed')) AS unlocked_n,
    toInt64(sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed')) AS unlocked_t,
    toInt64(countIf(type = 'connection_lost')) AS losses,
    toInt64(sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored'))) AS lost_n,
    toInt64(sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored'))) AS lost_t
FROM events
GROUP BY start, sensor_id;
