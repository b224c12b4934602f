-- +goose Up
-- Idempotent intake of free-form notifications (docs/DESIGN.md "Reliability"):
-- the AMQP bridge records each notification under a key — its message-id, or a
-- hash of routing key, body and AMQP timestamp — inserted with ON CONFLICT DO
-- NOTHING in the transaction that writes the inbox messages and emails, so a
-- redelivery or a second publication finds the key and writes nothing, across
-- restarts and concurrent consumers. Not partitioned: a unique key of a
-- partitioned table must hold the partition key, and a key must be unique
-- whatever month its copies arrive in. `lockstream maintain` deletes the keys
-- older than the retention (LOCKSTREAM_RETENTION) by recorded_at, in batches.
CREATE TABLE notification_keys (
    key         text PRIMARY KEY,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notification_keys_recorded_idx ON notification_keys (recorded_at);

-- +goose Down
DROP TABLE notification_keys;
