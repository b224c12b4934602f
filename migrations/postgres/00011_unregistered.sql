-- +goose Up
-- The unregistered sensor ids each consumer process saw most, per hour: a
-- space-saving summary of at most a few thousand ids per (hour, process), replaced
-- whole every few seconds by its process; rows older than 25 hours are deleted by
-- the same flush. count over-estimates by at most count_error (ids that entered the
-- summary late inherit the smallest count they displaced).
CREATE TABLE unregistered_sightings (
    hour        timestamptz NOT NULL,
    process     text NOT NULL,
    sensor_id   text NOT NULL,
    count       bigint NOT NULL,
    count_error bigint NOT NULL,
    last_seen   timestamptz NOT NULL,
    PRIMARY KEY (hour, process, sensor_id)
);

-- +goose Down
DROP TABLE unregistered_sightings;
