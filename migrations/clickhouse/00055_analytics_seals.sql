-- Exact rollups although the history writer is at-least-once (package
-- analytics, docs/DESIGN.md "Analytics", seals). A materialized view sums
-- every insert, so a replayed batch is summed twice in the rollups of 00040
-- and 00041 while the raw tables collapse it (FINAL). Queries therefore trust
-- the rollups of an hour only when it is sealed and nothing was inserted into
-- it since: history_touched records, per UTC hour, when rows last arrived in
-- it (a view on each raw table, the server's now()); rollup_seals records when
-- analytics.Store.SealRollups last made the hour's rollups equal to its raw
-- rows (by inserting the difference, signed, into every rollup). Any other
-- hour is read from raw rows. Works on ClickHouse 18.16 and current releases.
CREATE TABLE IF NOT EXISTS history_touched (
    hour       DateTime,
    touched_at DateTime
) ENGINE = ReplacingMergeTree(touched_at)
PARTITION BY toYYYYMM(hour)
ORDER BY hour;

CREATE TABLE IF NOT EXISTS rollup_seals (
    hour      DateTime,
    sealed_at DateTime
) ENGINE = ReplacingMergeTree(sealed_at)
PARTITION BY toYYYYMM(hour)
ORDER BY hour;

CREATE MATERIALIZED VIEW IF NOT EXISTS readings_touched_mv TO history_touched AS
SELECT toDateTime(intDiv(toUInt32(received_at), 3600) * 3600) AS hour, now() AS touched_at
FROM readings
GROUP BY hour;

CREATE MATERIALIZED VIEW IF NOT EXISTS events_touched_mv TO history_touched AS
SELECT toDateTime(intDiv(toUInt32(at), 3600) * 3600) AS hour, now() AS touched_at
FROM events
GROUP BY hour;

-- Every hour the rollups already hold is unsealed: the views were summing
-- copies before this migration. The views exist first, so no insert is missed.
INSERT INTO history_touched (hour, touched_at)
SELECT hour, now() FROM (
    SELECT hour FROM fleet_readings_hourly
    UNION ALL
    SELECT hour FROM fleet_events_hourly)
GROUP BY hour;
