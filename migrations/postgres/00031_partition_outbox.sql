-- +goose Up
-- Bounded storage (docs/DESIGN.md "Stores"): the outbox tables that grow with
-- traffic become partitioned by month, so `lockstream maintain` drops a month
-- whole instead of deleting rows. Converts tables in place on an existing
-- database: new partitioned tables are made, the rows copied, the old ones
-- dropped (one transaction: goose runs each file in one).
--
-- The partition key is the event's time, which a replayed event repeats, so a
-- replay lands in the partition of the original and the unique keys (which must
-- hold the partition key) still refuse it: one notification per (event, client),
-- one delivery per (notification, channel, target). A delivery and its
-- notification share event_at, and a push's received_at is its delivery's
-- event_at, so one month of an event lives in the same month partition of all
-- three tables; the foreign keys between them go, since whole months drop
-- together (maintain drops pushes, deliveries, notifications of a month at once).
--
-- Each table also has a DEFAULT partition: an event time outside every month
-- partition (a device clock years off, maintain stopped for months) lands there
-- instead of failing the fan-out. maintain never drops it; it reports its rows.

ALTER TABLE pushes RENAME TO pushes_unpartitioned;
ALTER TABLE deliveries RENAME TO deliveries_unpartitioned;
ALTER TABLE notifications RENAME TO notifications_unpartitioned;
-- The sequence outlives the old table.
ALTER SEQUENCE deliveries_seq OWNED BY NONE;

CREATE TABLE notifications_new (
    id         uuid NOT NULL,
    event_id   text NOT NULL,
    client_id  uuid NOT NULL,
    sensor_id  text NOT NULL,
    type       text NOT NULL CHECK (type IN ('state_changed', 'connection_lost', 'connection_restored')),
    data       smallint,
    previous   smallint,
    event_at   timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, event_at),
    UNIQUE (event_id, client_id, event_at)
) PARTITION BY RANGE (event_at);
ALTER TABLE notifications_new RENAME TO notifications;

CREATE TABLE deliveries_new (
    id               uuid NOT NULL,
    notification_id  uuid,
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
    seq              bigint NOT NULL DEFAULT nextval('deliveries_seq'),
    PRIMARY KEY (id, event_at),
    UNIQUE (notification_id, channel, target, event_at),
    CHECK (notification_id IS NULL OR (client_id IS NOT NULL AND sensor_id IS NOT NULL AND event_type IS NOT NULL))
) PARTITION BY RANGE (event_at);
ALTER TABLE deliveries_new RENAME TO deliveries;
ALTER SEQUENCE deliveries_seq OWNED BY deliveries.seq;

CREATE TABLE pushes_new (
    delivery_id           uuid NOT NULL,
    platform              text NOT NULL CHECK (platform IN ('IOS', 'ANDROID')),
    message_prototype_key text NOT NULL CHECK (message_prototype_key <> ''),
    push_key              text NOT NULL CHECK (push_key <> ''),
    message               text NOT NULL CHECK (message <> ''),
    cron_expression       text NOT NULL DEFAULT '',
    window_at             timestamptz NOT NULL,
    received_at           timestamptz NOT NULL,
    PRIMARY KEY (delivery_id, received_at)
) PARTITION BY RANGE (received_at);
ALTER TABLE pushes_new RENAME TO pushes;

CREATE TABLE notifications_default PARTITION OF notifications DEFAULT;
CREATE TABLE deliveries_default PARTITION OF deliveries DEFAULT;
CREATE TABLE pushes_default PARTITION OF pushes DEFAULT;

-- A partition for every month that holds rows, and this month and the next
-- three (least and greatest skip the NULL bounds of empty tables).
SELECT lockstream_month_partition(t, m)
FROM unnest(ARRAY['notifications', 'deliveries', 'pushes']) AS t,
     generate_series(
         date_trunc('month', least((SELECT min(event_at) FROM deliveries_unpartitioned),
                                   (SELECT min(event_at) FROM notifications_unpartitioned), now()) AT TIME ZONE 'UTC')
             AT TIME ZONE 'UTC',
         greatest((SELECT max(event_at) FROM deliveries_unpartitioned),
                  (SELECT max(event_at) FROM notifications_unpartitioned), now() + interval '3 months'),
         interval '1 month') AS m;
SELECT lockstream_month_partition('delivery_attempts', m)
FROM generate_series(now(), now() + interval '3 months', interval '1 month') AS m;

INSERT INTO notifications SELECT id, event_id, client_id, sensor_id, type, data, previous, event_at, created_at
FROM notifications_unpartitioned;
INSERT INTO deliveries SELECT id, notification_id, client_id, sensor_id, event_type, channel, target, state, attempts,
       next_attempt_at, leased_until, last_error, last_http_status, event_at, created_at, updated_at, seq
FROM deliveries_unpartitioned;
INSERT INTO pushes SELECT delivery_id, platform, message_prototype_key, push_key, message, cron_expression,
       window_at, received_at
FROM pushes_unpartitioned;

DROP TABLE pushes_unpartitioned;
DROP TABLE deliveries_unpartitioned;
DROP TABLE notifications_unpartitioned;

-- The indexes of 00004 and 00006, on the partitioned tables. GetDelivery and the
-- claim's updates find a delivery by id alone: one probe of each partition's
-- primary key, a few partitions under retention.
CREATE INDEX deliveries_due_idx ON deliveries (next_attempt_at)
    WHERE state IN ('SCHEDULED', 'PENDING', 'RETRY');
CREATE INDEX deliveries_open_idx ON deliveries (client_id, sensor_id, channel, target, event_at, seq)
    WHERE state IN ('SCHEDULED', 'PENDING', 'RETRY', 'IN_FLIGHT');
CREATE INDEX deliveries_lease_idx ON deliveries (leased_until) WHERE state = 'IN_FLIGHT';
CREATE INDEX deliveries_client_idx ON deliveries (client_id, id);

-- +goose Down
-- +goose StatementBegin
DO $$ BEGIN
    RAISE EXCEPTION 'migration 00031 (month-partitioned outbox) is not reversible';
END $$;
-- +goose StatementEnd
