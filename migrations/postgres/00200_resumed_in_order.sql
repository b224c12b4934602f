-- +goose Up
-- An endpoint disabled and then enabled receives its kept deliveries in the
-- order their events happened, across all its sensors (issue 21): today each
-- (client, sensor, channel, target) keeps its order, but the kept deliveries of
-- different sensors went out together and reached the endpoint in any order.
-- resumed_at marks a delivery that was PAUSED and made PENDING again (when);
-- the claim holds such a delivery back while an older resumed delivery of the
-- same client and channel is still open, so an endpoint's kept deliveries go out
-- one after another, oldest first. Deliveries never paused (resumed_at NULL, the
-- happy path) are not in the new index and pay one NULL test in the claim.
ALTER TABLE deliveries ADD COLUMN resumed_at timestamptz;

CREATE INDEX deliveries_resumed_open_idx ON deliveries (client_id, channel, event_at, seq)
    WHERE resumed_at IS NOT NULL AND state IN ('PENDING', 'RETRY', 'IN_FLIGHT');

-- lockstream_due_deliveries (migration 00120) with the resumed order.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION lockstream_due_deliveries(due_at timestamptz, max_rows int, channels text[])
RETURNS TABLE (id uuid, notification_id uuid, event_at timestamptz)
LANGUAGE plpgsql
ROWS 10
SET enable_sort = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT d.id, d.notification_id, d.event_at
    FROM deliveries d
    WHERE d.state IN ('SCHEDULED', 'PENDING', 'RETRY') AND d.next_attempt_at <= due_at
      AND (channels IS NULL OR d.channel = ANY (channels))
      AND NOT EXISTS (
        SELECT 1 FROM deliveries o
        WHERE o.client_id = d.client_id AND o.sensor_id = d.sensor_id
          AND o.channel = d.channel AND o.target = d.target
          AND o.state IN ('PENDING', 'RETRY', 'IN_FLIGHT')
          AND (o.event_at, o.seq) < (d.event_at, d.seq))
      AND (d.resumed_at IS NULL OR NOT EXISTS (
        SELECT 1 FROM deliveries o
        WHERE o.client_id = d.client_id AND o.channel = d.channel
          AND o.resumed_at IS NOT NULL AND o.state IN ('PENDING', 'RETRY', 'IN_FLIGHT')
          AND (o.event_at, o.seq) < (d.event_at, d.seq)))
    ORDER BY d.next_attempt_at
    LIMIT max_rows
    FOR UPDATE OF d SKIP LOCKED;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION lockstream_due_deliveries(due_at timestamptz, max_rows int, channels text[])
RETURNS TABLE (id uuid, notification_id uuid, event_at timestamptz)
LANGUAGE plpgsql
ROWS 10
SET enable_sort = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT d.id, d.notification_id, d.event_at
    FROM deliveries d
    WHERE d.state IN ('SCHEDULED', 'PENDING', 'RETRY') AND d.next_attempt_at <= due_at
      AND (channels IS NULL OR d.channel = ANY (channels))
      AND NOT EXISTS (
        SELECT 1 FROM deliveries o
        WHERE o.client_id = d.client_id AND o.sensor_id = d.sensor_id
          AND o.channel = d.channel AND o.target = d.target
          AND o.state IN ('PENDING', 'RETRY', 'IN_FLIGHT')
          AND (o.event_at, o.seq) < (d.event_at, d.seq))
    ORDER BY d.next_attempt_at
    LIMIT max_rows
    FOR UPDATE OF d SKIP LOCKED;
END
$$;
-- +goose StatementEnd
DROP INDEX deliveries_resumed_open_idx;
ALTER TABLE deliveries DROP COLUMN resumed_at;
