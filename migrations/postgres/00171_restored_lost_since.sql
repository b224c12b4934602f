-- +goose Up
-- A connection_restored says how long its sensor was lost (docs/DESIGN.md
-- "Operational notices"): its notification keeps lost_since, the sensor's last
-- reading before the loss, for the webhook, the email, the push and the feed;
-- silent_seconds is event_at − lost_since. NULL for every other event.
-- Metadata-only (no default).
ALTER TABLE notifications ADD COLUMN lost_since timestamptz;

-- +goose Down
ALTER TABLE notifications DROP COLUMN lost_since;
