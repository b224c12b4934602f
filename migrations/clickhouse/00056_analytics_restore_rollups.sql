-- Restore durations in the rollups (package analytics, docs/DESIGN.md
-- "Analytics"): per sensor (or the fleet) and UTC hour, the loss→restore
-- seconds of the hour's restores and how many were paired with their loss.
-- A restore's duration pairs it with the loss before it, which a view cannot
-- see (it sees one insert), so the views leave these 0 and
-- analytics.Store.SealRollups fills them when it seals the hour; queries read
-- them from sealed hours only, and pair restores from raw rows elsewhere.
-- Works on ClickHouse 18.16 (ADD COLUMN; a re-run finds the column there).
-- A view there must give every column of its table: the two views are made
-- again with the new columns (0). An insert between the drop and the create
-- is missed by the rollups but touches its hour (the views of 00055 stay), so
-- the next seal adds it.
DROP TABLE IF EXISTS events_hourly_mv;
DROP TABLE IF EXISTS fleet_events_hourly_mv;

ALTER TABLE events_hourly ADD COLUMN restore_seconds Int64 DEFAULT 0;
ALTER TABLE events_hourly ADD COLUMN restores_paired Int64 DEFAULT 0;
ALTER TABLE fleet_events_hourly ADD COLUMN restore_seconds Int64 DEFAULT 0;
ALTER TABLE fleet_events_hourly ADD COLUMN restores_paired Int64 DEFAULT 0;

CREATE MATERIALIZED VIEW IF NOT EXISTS events_hourly_mv TO events_hourly AS
SELECT sensor_id, toDateTime(intDiv(toUInt32(at), 3600) * 3600) AS hour,
    countIf(type = 'state_changed') AS changes,
    countIf(type = 'state_changed' AND ifNull(data, 1) = 0) AS unlocks,
    sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed') AS unlocked_n,
    sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed') AS unlocked_t,
    countIf(type = 'connection_lost') AS losses,
    countIf(type = 'connection_restored') AS restores,
    sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored')) AS lost_n,
    sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored')) AS lost_t,
    toInt64(0) AS restore_seconds,
    toInt64(0) AS restores_paired
FROM events
GROUP BY sensor_id, hour;

CREATE MATERIALIZED VIEW IF NOT EXISTS fleet_events_hourly_mv TO fleet_events_hourly AS
SELECT toDateTime(intDiv(toUInt32(at), 3600) * 3600) AS hour,
    countIf(type = 'state_changed') AS changes,
    countIf(type = 'state_changed' AND ifNull(data, 1) = 0) AS unlocks,
    sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed') AS unlocked_n,
    sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed') AS unlocked_t,
    countIf(type = 'connection_lost') AS losses,
    countIf(type = 'connection_restored') AS restores,
    sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored')) AS lost_n,
    sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored')) AS lost_t,
    toInt64(0) AS restore_seconds,
    toInt64(0) AS restores_paired
FROM events
GROUP BY hour;

-- Hours sealed before these columns existed hold no durations: unseal them.
INSERT INTO history_touched (hour, touched_at)
SELECT hour, now() FROM (
    SELECT hour FROM fleet_readings_hourly
    UNION ALL
    SELECT hour FROM fleet_events_hourly)
GROUP BY hour;
