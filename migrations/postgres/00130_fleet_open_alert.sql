-- +goose Up
-- Fleet judgement, step 1: a sensor may ask to be reported when it stays
-- unlocked longer than open_alert_after (NULL = never). sensor_state remembers
-- the opening (its changed_at) already reported, so each opening is reported
-- once; the partial index keeps the heartbeat's search to the sensors that ask.
ALTER TABLE sensors ADD COLUMN open_alert_after interval CHECK (open_alert_after > interval '0');
ALTER TABLE sensor_state ADD COLUMN open_alerted_at timestamptz;
CREATE INDEX sensors_open_alert_idx ON sensors (id) INCLUDE (open_alert_after) WHERE open_alert_after IS NOT NULL;
-- notifications listed the three first event types; the fleet judgement adds
-- more (event.Types). A type is a lower-case word; event.Decode checks it is
-- a known one before the fan-out writes it.
ALTER TABLE notifications DROP CONSTRAINT IF EXISTS notifications_new_type_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_type_check CHECK (type ~ '^[a-z_]{1,64}$');

-- +goose Down
ALTER TABLE notifications DROP CONSTRAINT notifications_type_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_new_type_check
    CHECK (type IN ('state_changed', 'connection_lost', 'connection_restored'));
DROP INDEX sensors_open_alert_idx;
ALTER TABLE sensor_state DROP COLUMN open_alerted_at;
ALTER TABLE sensors DROP COLUMN open_alert_after;
