-- +goose Up
-- Escalation of unseen messages (docs/DESIGN.md "Escalation of unseen messages").

-- A message the member marked unseen itself (it had seen it): it belongs to no
-- episode. Metadata-only on Postgres 11+ (a constant default).
ALTER TABLE inbox_messages ADD COLUMN self_unseen boolean NOT NULL DEFAULT false;

-- The episode key of a message: its sensor, or '#' and its type for a free-form
-- notification ('#' is in no sensor id). Whether an episode still has unseen
-- messages is one probe of this index.
CREATE INDEX inbox_messages_episode_idx
    ON inbox_messages (member_id, (coalesce(sensor_id, '#' || type)), seq)
    WHERE seen_at IS NULL AND deleted_at IS NULL AND NOT self_unseen;

-- One row per (member, key): the member's current or last episode about it.
-- Inbox writes open one (first_seq = the seq of its first message, opened_at)
-- when a message arrives and the last one has no unseen message left, in the
-- statement that inserts the messages; the episode is over once every message
-- of it (key, seq >= first_seq) is seen or deleted, which nothing needs to
-- write down. An escalation round sets email_at and push_at when it handled
-- the channel (whether or not it sent anything).
CREATE TABLE escalation_episodes (
    member_id   uuid NOT NULL REFERENCES members (id) ON DELETE CASCADE,
    key         text NOT NULL,
    client_id   uuid NOT NULL,
    -- NULL for a free-form notification's episode.
    sensor_id   text,
    type        text NOT NULL,
    first_seq   bigint NOT NULL,
    opened_at   timestamptz NOT NULL,
    -- When a critical message first joined the episode: the waits are a
    -- quarter as long from then.
    critical_at timestamptz,
    email_at    timestamptz,
    push_at     timestamptz,
    PRIMARY KEY (member_id, key)
) WITH (fillfactor = 80);

-- A round finds due episodes by these; each holds only rows not handled yet.
CREATE INDEX escalation_episodes_email_idx ON escalation_episodes (opened_at) WHERE email_at IS NULL;
CREATE INDEX escalation_episodes_push_idx ON escalation_episodes (opened_at) WHERE push_at IS NULL;
CREATE INDEX escalation_episodes_critical_idx ON escalation_episodes (critical_at)
    WHERE critical_at IS NOT NULL AND (email_at IS NULL OR push_at IS NULL);

-- Digest members: where their last digest stands (seq, digest time).
CREATE TABLE member_digests (
    member_id  uuid PRIMARY KEY REFERENCES members (id) ON DELETE CASCADE,
    digest_seq bigint NOT NULL,
    slot       timestamptz NOT NULL
);
CREATE INDEX members_digest_idx ON members (id) WHERE preferences ->> 'email' = 'digest';

-- What an escalation email (a delivery of channel email, target
-- 'member:<id>', no notification) lists, rendered when it is sent: the unseen
-- messages of the episode (key, seq > from_seq), or of the digest (from_seq <
-- seq <= to_seq). 1:1 with its delivery, partitioned like it.
CREATE TABLE member_emails (
    delivery_id uuid NOT NULL,
    event_at    timestamptz NOT NULL,
    member_id   uuid NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('unseen', 'digest')),
    key         text,
    from_seq    bigint NOT NULL,
    to_seq      bigint,
    PRIMARY KEY (delivery_id, event_at)
) PARTITION BY RANGE (event_at);
CREATE TABLE member_emails_default PARTITION OF member_emails DEFAULT;
SELECT lockstream_month_partition('member_emails', now() + make_interval(months => m)) FROM generate_series(0, 3) AS m;

-- +goose Down
DROP TABLE member_emails;
DROP INDEX members_digest_idx;
DROP TABLE member_digests;
DROP TABLE escalation_episodes;
DROP INDEX inbox_messages_episode_idx;
ALTER TABLE inbox_messages DROP COLUMN self_unseen;
