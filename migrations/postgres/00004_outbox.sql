-- +goose Up
-- The delivery outbox: one notification per (event, client), one delivery per
-- (notification, channel, target). The fan-out writes them; retriers claim due
-- deliveries with FOR UPDATE SKIP LOCKED and record each outcome.

-- Time-ordered ids (UUIDv7) made in SQL, so the fan-out creates rows set-based;
-- Postgres 18 has uuidv7() built in, the versions in use here do not.
-- +goose StatementBegin
CREATE FUNCTION lockstream_uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;
-- +goose StatementEnd

-- No foreign keys to clients or sensors: the history of a deleted client or sensor
-- stays, and the retrier fails what can no longer be delivered.
CREATE TABLE notifications (
    id         uuid PRIMARY KEY,
    event_id   text NOT NULL,
    client_id  uuid NOT NULL,
    sensor_id  text NOT NULL,
    type       text NOT NULL CHECK (type IN ('state_changed', 'connection_lost', 'connection_restored')),
    data       smallint,
    previous   smallint,
    event_at   timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, client_id)
);

-- A delivery is one channel's job for one notification. notification_id,
-- client_id, sensor_id and event_type are NULL for deliveries that belong to no
-- sensor event (the standalone push API reuses this table and the retrier); such
-- deliveries are never ordered or superseded. target tells apart deliveries of one
-- channel: the device ("IOS:<push key>") for swrve, empty otherwise.
--
-- next_attempt_at is when the delivery is next due: creation for PENDING, the
-- back-off for RETRY, the opening of its window for SCHEDULED (due SCHEDULED rows
-- are claimed like PENDING ones).
CREATE TABLE deliveries (
    id               uuid PRIMARY KEY,
    notification_id  uuid REFERENCES notifications (id) ON DELETE CASCADE,
    client_id        uuid,
    sensor_id        text,
    event_type       text,
    channel          text NOT NULL CHECK (channel IN ('webhook', 'email', 'swrve')),
    target           text NOT NULL DEFAULT '',
    state            text NOT NULL CHECK (state IN ('SCHEDULED', 'PENDING', 'IN_FLIGHT', 'RETRY',
                                                    'SENT', 'FAILED', 'GIVEN_UP', 'SUPERSEDED')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL,
    leased_until     timestamptz,
    last_error       text NOT NULL DEFAULT '',
    last_http_status integer,
    event_at         timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (notification_id, channel, target),
    CHECK (notification_id IS NULL OR (client_id IS NOT NULL AND sensor_id IS NOT NULL AND event_type IS NOT NULL))
);

-- The claim walks due rows in next_attempt_at order; the index holds only rows
-- that can become due, so it stays as small as the backlog.
CREATE INDEX deliveries_due_idx ON deliveries (next_attempt_at)
    WHERE state IN ('SCHEDULED', 'PENDING', 'RETRY');

-- Open deliveries per (client, sensor, channel, target) in event order: the claim's
-- ordering check, superseding and the outbox depth read only this index.
CREATE INDEX deliveries_open_idx ON deliveries (client_id, sensor_id, channel, target, event_at)
    WHERE state IN ('SCHEDULED', 'PENDING', 'RETRY', 'IN_FLIGHT');

-- The lease sweep.
CREATE INDEX deliveries_lease_idx ON deliveries (leased_until) WHERE state = 'IN_FLIGHT';

-- A client's delivery history, in creation (id) order.
CREATE INDEX deliveries_client_idx ON deliveries (client_id, id);

-- +goose Down
DROP TABLE deliveries;
DROP TABLE notifications;
DROP FUNCTION lockstream_uuid_v7();
