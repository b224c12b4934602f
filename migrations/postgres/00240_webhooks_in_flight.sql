-- +goose Up
-- Issue 21: a webhook's first attempt that succeeds writes no delivery row.
-- When the fan-out and the sender share a process, the fan-out hands a webhook
-- over on commit (fanout.Claim) and records it here instead of in deliveries:
-- a small row (no state, two index entries) that says "this webhook is being
-- attempted, by a process whose lease runs to leased_until". The outcome write
-- deletes it; only an attempt that did not succeed makes a deliveries row (in
-- the state the attempt left it: RETRY, FAILED, GIVEN_UP or SUPERSEDED), in the
-- same statement that logs the attempt. A process that dies first leaves the
-- row to the lease sweep, which turns it into a PENDING delivery with its
-- attempt logged LEASE_EXPIRED, as for an expired claim. Rows live for the
-- length of an attempt, so the table stays as small as the webhooks in flight.
CREATE TABLE webhooks_in_flight (
    id              uuid PRIMARY KEY,
    notification_id uuid NOT NULL,
    client_id       uuid NOT NULL,
    sensor_id       text NOT NULL,
    event_id        text NOT NULL,
    event_type      text NOT NULL,
    event_at        timestamptz NOT NULL,
    leased_until    timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
-- Order per (client, sensor): the claim holds a webhook back while an older
-- one of its key is in flight here, as it does behind an IN_FLIGHT row.
CREATE INDEX webhooks_in_flight_key_idx ON webhooks_in_flight (client_id, sensor_id, event_at);

-- A client's delivery history lists a handed-over webhook delivered at its
-- first attempt from that attempt (it has no other row): this index reads them
-- per client in id order.
CREATE INDEX delivery_attempts_first_sent_idx ON delivery_attempts (client_id, delivery_id)
    WHERE channel = 'webhook' AND attempt = 1 AND status = 'SENT' AND recorded;

-- lockstream_due_deliveries (migrations 00120, 00200) with the webhooks in
-- flight in the order check.
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
      AND (d.channel <> 'webhook' OR d.notification_id IS NULL OR NOT EXISTS (
        SELECT 1 FROM webhooks_in_flight h
        WHERE h.client_id = d.client_id AND h.sensor_id = d.sensor_id AND h.event_at <= d.event_at))
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
DROP INDEX delivery_attempts_first_sent_idx;
DROP TABLE webhooks_in_flight;
