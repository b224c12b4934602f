-- +goose Up
-- Members: the people of a client, who read its notifications in an inbox of their
-- own and may watch it live (docs/DESIGN.md "Members", "Inbox", "Live stream").

CREATE TABLE members (
    id          uuid PRIMARY KEY,
    client_id   uuid NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    name        text NOT NULL,
    email       text,
    timezone    text NOT NULL DEFAULT 'UTC',
    preferences jsonb NOT NULL,
    -- SHA-256 of the member's bearer token (lsm_…); the token itself is shown once.
    token_hash  bytea NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
-- The fan-out's join from a notification's client to its members, and the listing.
CREATE INDEX members_client_idx ON members (client_id, id);

CREATE TABLE member_push_targets (
    member_id uuid NOT NULL REFERENCES members (id) ON DELETE CASCADE,
    platform  text NOT NULL CHECK (platform IN ('IOS', 'ANDROID')),
    push_key  text NOT NULL,
    PRIMARY KEY (member_id, platform, push_key)
);

-- One narrow row per member: the inbox's counter (last_seq, the seq of the newest
-- message), what the member's stream acknowledged, and the epoch its stream
-- announces. Writers of the inbox lock these rows in member-id order and move
-- last_seq in the same transaction as the messages they insert, so seqs have no
-- gap and no duplicate whatever the number of concurrent writers. Kept apart from
-- members so that the per-message update does not rewrite the wide member row.
CREATE TABLE member_inbox (
    member_id uuid PRIMARY KEY REFERENCES members (id) ON DELETE CASCADE,
    last_seq  bigint NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    acked_seq bigint NOT NULL DEFAULT 0 CHECK (acked_seq >= 0 AND acked_seq <= last_seq),
    epoch     text NOT NULL
) WITH (fillfactor = 70); -- room for HOT updates of the counter

-- The inbox: one row per (member, message), partitioned by month of arrival so
-- that retention drops whole partitions. No foreign key to members: deleting a
-- member deletes its rows explicitly, and the fan-out's insert stays free of
-- per-row checks. The primary key must hold the partition key; seq is unique per
-- member by construction (member_inbox).
CREATE TABLE inbox_messages (
    member_id       uuid NOT NULL,
    seq             bigint NOT NULL,
    id              uuid NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    client_id       uuid NOT NULL,
    -- The notification (event × client) the message comes from; NULL for a
    -- free-form notification.
    notification_id uuid,
    type            text NOT NULL,
    sensor_id       text,
    data            smallint,
    previous        smallint,
    event_at        timestamptz NOT NULL,
    severity        text NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    cause           text NOT NULL CHECK (cause IN ('event', 'new_member')),
    subject         text,
    message         jsonb,
    seen_at         timestamptz,
    deleted_at      timestamptz,
    PRIMARY KEY (member_id, seq, created_at)
) PARTITION BY RANGE (created_at);

-- GET /v1/messages/{id}.
CREATE INDEX inbox_messages_id_idx ON inbox_messages (id);
-- Lists and counts: unseen (the default) and all, newest first, per member; both
-- partial, so a count reads only the member's matching entries (index-only, with
-- type included for the message-type filter).
CREATE INDEX inbox_messages_unseen_idx ON inbox_messages (member_id, event_at, seq) INCLUDE (type)
    WHERE seen_at IS NULL AND deleted_at IS NULL;
CREATE INDEX inbox_messages_listed_idx ON inbox_messages (member_id, event_at, seq) INCLUDE (type)
    WHERE deleted_at IS NULL;

-- The new-member backfill reads a client's latest notifications.
CREATE INDEX notifications_client_idx ON notifications (client_id, created_at);

-- inbox_partition creates the month partition of inbox_messages holding month
-- (any time in it), unless it exists, and returns its name:
-- inbox_messages_YYYYMM.
-- +goose StatementBegin
CREATE FUNCTION lockstream_inbox_partition(month timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    first timestamptz := date_trunc('month', month AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    name  text := 'inbox_messages_' || to_char(first AT TIME ZONE 'UTC', 'YYYYMM');
BEGIN
    EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF inbox_messages FOR VALUES FROM (%L) TO (%L)',
                   name, first, first + interval '1 month');
    RETURN name;
END
$$;
-- +goose StatementEnd

-- This month and the next three; `lockstream maintain` keeps creating them ahead.
SELECT lockstream_inbox_partition(now() + make_interval(months => m)) FROM generate_series(0, 3) AS m;

-- +goose Down
DROP FUNCTION lockstream_inbox_partition(timestamptz);
DROP INDEX notifications_client_idx;
DROP TABLE inbox_messages;
DROP TABLE member_inbox;
DROP TABLE member_push_targets;
DROP TABLE members;
