-- +goose Up
-- Fleet judgement, step 4: flapping. unstable_since is set by the state
-- consumer when a sensor changed more than LOCKSTREAM_FLAP_CHANGES times in
-- LOCKSTREAM_FLAP_WINDOW, and cleared when the streak ends (by the consumer at
-- the next change after a quiet window, or by the heartbeat once the window
-- passed quietly); the partial index keeps the heartbeat's search to the
-- unstable sensors.
ALTER TABLE sensor_state ADD COLUMN unstable_since timestamptz;
CREATE INDEX sensor_state_unstable_idx ON sensor_state (sensor_id) INCLUDE (unstable_since, changed_at)
    WHERE unstable_since IS NOT NULL;

-- +goose Down
DROP INDEX sensor_state_unstable_idx;
ALTER TABLE sensor_state DROP COLUMN unstable_since;
