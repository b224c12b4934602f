-- +goose Up
-- Shared inbox messages (docs/DESIGN.md "Inbox", "Shared messages"): an event
-- that reaches every member of its client alike is written once, as one
-- inbox_shared row numbered by the client's counter (clients.inbox_cseq), and
-- announced at once; each member's own row is written from it right after the
-- commit (materialized), off the live stream's path. A member's seq of shared
-- message c is fixed when c is written: mat_seq + (c - mat_cseq) + the member's
-- own messages written after position mat_cseq and before c (gaps: the client
-- counter each of them was written at). Rows are deleted once every member
-- of their client has its own copy.
ALTER TABLE clients ADD COLUMN inbox_cseq bigint NOT NULL DEFAULT 0;

ALTER TABLE member_inbox
    ADD COLUMN mat_cseq bigint NOT NULL DEFAULT 0,
    ADD COLUMN mat_seq bigint NOT NULL DEFAULT 0,
    ADD COLUMN gaps bigint[] NOT NULL DEFAULT '{}';
UPDATE member_inbox SET mat_seq = last_seq;

CREATE TABLE inbox_shared (
    client_id       uuid NOT NULL,
    cseq            bigint NOT NULL,
    id              uuid NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    notification_id uuid,
    type            text NOT NULL,
    sensor_id       text,
    data            smallint,
    previous        smallint,
    event_at        timestamptz NOT NULL,
    severity        text NOT NULL,
    cause           text NOT NULL,
    subject         text,
    message         jsonb,
    PRIMARY KEY (client_id, cseq)
);

-- A member's copy of shared message e has its own id, derived from e's (a
-- UUIDv7: the copies keep its time, so ids still sort by arrival) and the
-- member's, so the live stream can announce it before the copy is written, and
-- another member's message stays a 404.
-- +goose StatementBegin
CREATE FUNCTION lockstream_member_message_id(shared uuid, member uuid) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT encode(set_bit(set_bit(
        overlay(uuid_send(shared) PLACING substring(decode(md5(shared::text || member::text), 'hex') FROM 9 FOR 8)
                FROM 9 FOR 8),
        71, 1), 70, 0), 'hex')::uuid
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION lockstream_member_message_id(uuid, uuid);
DROP TABLE inbox_shared;
ALTER TABLE member_inbox DROP COLUMN gaps, DROP COLUMN mat_seq, DROP COLUMN mat_cseq;
ALTER TABLE clients DROP COLUMN inbox_cseq;
