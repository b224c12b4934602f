-- +goose Up
-- Delivery controls (issue 17, docs/DESIGN.md "Delivery controls"): a client's
-- subscriptions by event type, its webhook endpoint's rate limit, the health the
-- auto-disable judges by, and the PAUSED state of a disabled endpoint's
-- deliveries.

-- event_types NULL: every type, those added later included. rate_limit NULL: none.
-- webhook_failing_since: the first failed webhook attempt since the last
-- successful one (NULL while healthy), webhook_failures the failures since then;
-- the retrier keeps both. endpoint_disabled_at: NULL while enabled.
ALTER TABLE clients
    ADD COLUMN event_types text[] CHECK (event_types IS NULL OR cardinality(event_types) > 0),
    ADD COLUMN rate_limit integer CHECK (rate_limit IS NULL OR rate_limit > 0),
    ADD COLUMN webhook_failing_since timestamptz,
    ADD COLUMN webhook_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN endpoint_disabled_at timestamptz;

-- The auto-disable sweep reads only the endpoints failing now.
CREATE INDEX clients_failing_idx ON clients (webhook_failing_since)
    WHERE webhook_failing_since IS NOT NULL AND endpoint_disabled_at IS NULL;

-- PAUSED: a webhook delivery kept while its endpoint is disabled; enabling the
-- endpoint makes it PENDING again.
-- +goose StatementBegin
DO $$
DECLARE c text;
BEGIN
    FOR c IN SELECT conname FROM pg_constraint
             WHERE conrelid = 'deliveries'::regclass AND contype = 'c'
               AND pg_get_constraintdef(oid) LIKE '%SUPERSEDED%'
    LOOP
        EXECUTE format('ALTER TABLE deliveries DROP CONSTRAINT %I', c);
    END LOOP;
END $$;
-- +goose StatementEnd
ALTER TABLE deliveries ADD CONSTRAINT deliveries_state_check
    CHECK (state IN ('SCHEDULED', 'PENDING', 'IN_FLIGHT', 'RETRY', 'PAUSED',
                     'SENT', 'FAILED', 'GIVEN_UP', 'SUPERSEDED'));

-- A disabled endpoint's kept deliveries, in event order, for its enabling.
CREATE INDEX deliveries_paused_idx ON deliveries (client_id, event_at, seq) WHERE state = 'PAUSED';

-- What happened to an endpoint (endpoint_disabled, endpoint_enabled), and the
-- owner's email about it: emailed_at is set once the message went out (or could
-- not: email_error says why), so each disabling is mailed once.
CREATE TABLE endpoint_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    client_id   uuid NOT NULL,
    type        text NOT NULL CHECK (type IN ('endpoint_disabled', 'endpoint_enabled')),
    detail      text NOT NULL DEFAULT '',
    at          timestamptz NOT NULL DEFAULT now(),
    emailed_at  timestamptz,
    email_error text NOT NULL DEFAULT ''
);
CREATE INDEX endpoint_events_client_idx ON endpoint_events (client_id, id);
CREATE INDEX endpoint_events_unmailed_idx ON endpoint_events (id)
    WHERE type = 'endpoint_disabled' AND emailed_at IS NULL;

-- +goose Down
DROP TABLE endpoint_events;
DROP INDEX deliveries_paused_idx;
UPDATE deliveries SET state = 'PENDING' WHERE state = 'PAUSED';
ALTER TABLE deliveries DROP CONSTRAINT deliveries_state_check;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_state_check
    CHECK (state IN ('SCHEDULED', 'PENDING', 'IN_FLIGHT', 'RETRY', 'SENT', 'FAILED', 'GIVEN_UP', 'SUPERSEDED'));
DROP INDEX clients_failing_idx;
ALTER TABLE clients
    DROP COLUMN event_types, DROP COLUMN rate_limit, DROP COLUMN webhook_failing_since,
    DROP COLUMN webhook_failures, DROP COLUMN endpoint_disabled_at;
