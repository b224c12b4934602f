-- +goose Up
-- The standalone push service (POST /push, POST /v1/pushes): a push is a swrve
-- delivery that belongs to no sensor event (notification_id, client_id,
-- sensor_id and event_type NULL, target 'IOS:<device push key>'), so the outbox,
-- its claims, back-off, leases and attempt log serve it unchanged; this table
-- keeps what only a push has, 1:1 with its delivery, which shares its id.
--
-- A separate table rather than columns on deliveries: the outbox rows and their
-- partial indexes stay narrow for the sensor notifications that make most of
-- them, and the message (up to a few KB) is read only when the push is sent.
CREATE TABLE pushes (
    delivery_id           uuid PRIMARY KEY REFERENCES deliveries (id) ON DELETE CASCADE,
    platform              text NOT NULL CHECK (platform IN ('IOS', 'ANDROID')),
    message_prototype_key text NOT NULL CHECK (message_prototype_key <> ''),
    -- The device's push key (Swrve's "user").
    push_key              text NOT NULL CHECK (push_key <> ''),
    message               text NOT NULL CHECK (message <> ''),
    -- Empty for an immediate push. A scheduled push is sent once, when the
    -- expression next activates after received_at (its window opens): that time
    -- is its delivery's first next_attempt_at, kept here as window_at.
    cron_expression       text NOT NULL DEFAULT '',
    window_at             timestamptz NOT NULL,
    received_at           timestamptz NOT NULL
);

-- +goose Down
DROP TABLE pushes;
