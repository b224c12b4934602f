-- +goose Up
-- Operational notices (docs/DESIGN.md "Operational notices"): a client hears
-- that its webhook endpoint is failing, was disabled, or recovered, on its
-- feed, by email and in its members' inboxes, never by the failing webhook.
--
-- endpoint_notice is the last notice the client was given about its endpoint's
-- current streak: '' (none: healthy, or failing less than the threshold),
-- 'failing' (endpoint_failing was given) or 'disabled' (endpoint_disabled was).
-- The health statement moves it under the client row's lock, so one
-- endpoint_failing is given per failing streak whatever the number of
-- retriers, and endpoint_recovered only after a notice.
ALTER TABLE clients ADD COLUMN endpoint_notice text NOT NULL DEFAULT ''
    CHECK (endpoint_notice IN ('', 'failing', 'disabled'));
UPDATE clients SET endpoint_notice = 'disabled' WHERE endpoint_disabled_at IS NOT NULL;

ALTER TABLE endpoint_events DROP CONSTRAINT endpoint_events_type_check;
ALTER TABLE endpoint_events ADD CONSTRAINT endpoint_events_type_check
    CHECK (type IN ('endpoint_disabled', 'endpoint_enabled', 'endpoint_failing', 'endpoint_recovered'));
-- When the notice went onto the client's feed and into its members' inboxes;
-- events from before this migration count as published.
ALTER TABLE endpoint_events ADD COLUMN published_at timestamptz;
UPDATE endpoint_events SET published_at = at;
CREATE INDEX endpoint_events_unpublished_idx ON endpoint_events (id)
    WHERE published_at IS NULL AND type <> 'endpoint_enabled';
DROP INDEX endpoint_events_unmailed_idx;
CREATE INDEX endpoint_events_unmailed_idx ON endpoint_events (id)
    WHERE type <> 'endpoint_enabled' AND emailed_at IS NULL;

-- +goose Down
DROP INDEX endpoint_events_unmailed_idx;
CREATE INDEX endpoint_events_unmailed_idx ON endpoint_events (id)
    WHERE type = 'endpoint_disabled' AND emailed_at IS NULL;
DROP INDEX endpoint_events_unpublished_idx;
ALTER TABLE endpoint_events DROP COLUMN published_at;
DELETE FROM endpoint_events WHERE type IN ('endpoint_failing', 'endpoint_recovered');
ALTER TABLE endpoint_events DROP CONSTRAINT endpoint_events_type_check;
ALTER TABLE endpoint_events ADD CONSTRAINT endpoint_events_type_check
    CHECK (type IN ('endpoint_disabled', 'endpoint_enabled'));
ALTER TABLE clients DROP COLUMN endpoint_notice;
