-- +goose Up
-- The incident events (docs/DESIGN.md "Incidents"): incident_opened,
-- incident_acknowledged, incident_resolved, written in the transaction that
-- opens, acknowledges or resolves the incident, then published (once: FOR
-- UPDATE SKIP LOCKED, published_at set) onto the client's feed and to its
-- webhook when it subscribes to the type, as the operational notices are.
CREATE TABLE incident_events (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    incident_id  uuid NOT NULL REFERENCES incidents (id) ON DELETE CASCADE,
    type         text NOT NULL CHECK (type IN ('incident_opened', 'incident_acknowledged', 'incident_resolved')),
    at           timestamptz NOT NULL,
    published_at timestamptz
);
CREATE INDEX incident_events_unpublished_idx ON incident_events (id) WHERE published_at IS NULL;

-- +goose Down
DROP TABLE incident_events;
