-- +goose Up
-- Issue 21 (the database's cost per webhook): a sensor's change updated its
-- sensor_state row with a new index entry every time. changed_at was an
-- INCLUDE column of sensor_state_unstable_idx, and an update that changes an
-- indexed column is never HOT; and with the default fillfactor of 100 a page
-- has no room for the new version anyway. Now the flapping index carries only
-- unstable_since (its query, heartbeat's stable sweep, reads the few unstable
-- sensors' changed_at from their rows), and pages keep a fifth free, so a
-- change rewrites its row in place in the same page (HOT): no index entry,
-- and the old version is pruned without VACUUM. The fillfactor applies to
-- pages written from now on; existing pages get their room as rows move.
ALTER TABLE sensor_state SET (fillfactor = 80);
DROP INDEX sensor_state_unstable_idx;
CREATE INDEX sensor_state_unstable_idx ON sensor_state (sensor_id) INCLUDE (unstable_since)
    WHERE unstable_since IS NOT NULL;

-- +goose Down
DROP INDEX sensor_state_unstable_idx;
CREATE INDEX sensor_state_unstable_idx ON sensor_state (sensor_id) INCLUDE (unstable_since, changed_at)
    WHERE unstable_since IS NOT NULL;
ALTER TABLE sensor_state RESET (fillfactor);
