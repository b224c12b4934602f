-- +goose Up
-- Resolved incidents are kept LOCKSTREAM_INCIDENT_RETENTION, then deleted a
-- batch at a time with their tiers, timeline and ack tokens (ON DELETE
-- CASCADE); the purge walks this index, which holds resolved ones only.
CREATE INDEX incidents_resolved_idx ON incidents (resolved_at) WHERE state = 'resolved';

-- +goose Down
DROP INDEX incidents_resolved_idx;
