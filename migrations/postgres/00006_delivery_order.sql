-- +goose Up
-- Event order inside one fan-out batch. A connection_restored and the state_changed
-- of the same reading share their event time, and time-ordered ids made within one
-- millisecond are random, so neither orders them. seq is taken in the order of the
-- events on lockstream.events (CreateNotifications inserts in that order), and breaks
-- ties in the claim's per-(client, sensor, channel, target) order.
CREATE SEQUENCE deliveries_seq;
ALTER TABLE deliveries ADD COLUMN seq bigint NOT NULL DEFAULT nextval('deliveries_seq');
ALTER SEQUENCE deliveries_seq OWNED BY deliveries.seq;
DROP INDEX deliveries_open_idx;
CREATE INDEX deliveries_open_idx ON deliveries (client_id, sensor_id, channel, target, event_at, seq)
    WHERE state IN ('SCHEDULED', 'PENDING', 'RETRY', 'IN_FLIGHT');

-- +goose Down
DROP INDEX deliveries_open_idx;
CREATE INDEX deliveries_open_idx ON deliveries (client_id, sensor_id, channel, target, event_at)
    WHERE state IN ('SCHEDULED', 'PENDING', 'RETRY', 'IN_FLIGHT');
ALTER TABLE deliveries DROP COLUMN seq;
