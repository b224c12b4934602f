-- +goose Up
-- Incidents: problems that people own (docs/DESIGN.md "Incidents").

-- A client's escalation policy (domain.EscalationPolicy as JSON); none means
-- the default policy.
CREATE TABLE incident_policies (
    client_id  uuid PRIMARY KEY REFERENCES clients (id) ON DELETE CASCADE,
    policy     jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row per incident. subject is what it is about: 'sensor:<id>' or
-- 'site:<name>'; at most one unresolved incident per (client, subject), which
-- the partial unique index enforces whatever the number of intake processes.
CREATE TABLE incidents (
    id              uuid PRIMARY KEY,
    client_id       uuid NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    subject         text NOT NULL,
    sensor_id       text,
    site            text,
    state           text NOT NULL CHECK (state IN ('open', 'acknowledged', 'resolved')),
    severity        text NOT NULL CHECK (severity IN ('warning', 'critical')),
    -- The event that opened it: its type, id and the client's seq of it.
    type            text NOT NULL,
    event_id        text NOT NULL,
    opened_seq      bigint NOT NULL,
    opened_at       timestamptz NOT NULL,
    -- The events attached to it, the opening one included.
    events          int NOT NULL DEFAULT 1,
    last_event_at   timestamptz NOT NULL,
    acknowledged_at timestamptz,
    acknowledged_by uuid,
    resolved_at     timestamptz,
    resolved_by     uuid,
    -- The clearing event that resolved it, when it resolved by itself.
    resolved_event  text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX incidents_unresolved_idx ON incidents (client_id, subject) WHERE state <> 'resolved';
CREATE INDEX incidents_client_idx ON incidents (client_id, opened_at DESC);

-- The reminder schedule of an incident's escalation tiers, snapshotted from
-- the policy when it opened: tier's members (NULL: every member of the
-- client) are reminded at next_at, then every repeat_every while next_at <=
-- stop_at. A round claims due rows by moving next_at on; ack and resolve set
-- it NULL. The partial index holds only rows still to remind.
CREATE TABLE incident_tiers (
    incident_id  uuid NOT NULL REFERENCES incidents (id) ON DELETE CASCADE,
    tier         int NOT NULL,
    members      uuid[],
    next_at      timestamptz,
    repeat_every interval NOT NULL CHECK (repeat_every >= interval '1 second'),
    stop_at      timestamptz NOT NULL,
    PRIMARY KEY (incident_id, tier)
);
CREATE INDEX incident_tiers_due_idx ON incident_tiers (next_at) WHERE next_at IS NOT NULL;

-- Everything that happened to an incident: opened, attached (a later event),
-- reminder (to a member, on a channel), ack, resolve.
CREATE TABLE incident_timeline (
    incident_id uuid NOT NULL REFERENCES incidents (id) ON DELETE CASCADE,
    id          bigint GENERATED ALWAYS AS IDENTITY,
    at          timestamptz NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('opened', 'attached', 'reminder', 'ack', 'resolve')),
    member_id   uuid,
    channel     text,
    detail      text NOT NULL DEFAULT '',
    PRIMARY KEY (incident_id, id)
);

-- One-click ack links: the SHA-256 of a random token (the token itself is
-- only in the member's message), single-use, with an expiry.
CREATE TABLE incident_ack_tokens (
    hash        bytea PRIMARY KEY,
    incident_id uuid NOT NULL REFERENCES incidents (id) ON DELETE CASCADE,
    member_id   uuid NOT NULL,
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz
);
CREATE INDEX incident_ack_tokens_expiry_idx ON incident_ack_tokens (expires_at);

-- Where the incident intake stands in each client's event feed (the
-- notifications' client_seq). Clients with events before incidents existed
-- start at their current seq: old events open no incident.
CREATE TABLE incident_cursors (
    client_id uuid PRIMARY KEY,
    last_seq  bigint NOT NULL CHECK (last_seq >= 0)
);
INSERT INTO incident_cursors (client_id, last_seq) SELECT client_id, last_seq FROM client_event_seq;

-- +goose Down
DROP TABLE incident_cursors;
DROP TABLE incident_ack_tokens;
DROP TABLE incident_timeline;
DROP TABLE incident_tiers;
DROP TABLE incidents;
DROP TABLE incident_policies;
