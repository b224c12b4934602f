-- +goose Up
-- Sensors, clients, their push targets and who watches which sensor.
CREATE TABLE sensors (
    id                text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9]{1,16}$'),
    address           text NOT NULL CHECK (length(address) BETWEEN 1 AND 256),
    heartbeat_timeout interval,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE clients (
    id          uuid PRIMARY KEY,
    name        text NOT NULL,
    webhook_url text NOT NULL,
    email       text,
    secret      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE push_targets (
    client_id uuid NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    platform  text NOT NULL CHECK (platform IN ('IOS', 'ANDROID')),
    push_key  text NOT NULL,
    PRIMARY KEY (client_id, platform, push_key)
);

CREATE TABLE client_sensors (
    client_id  uuid NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    sensor_id  text NOT NULL REFERENCES sensors (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (client_id, sensor_id)
);
CREATE INDEX client_sensors_sensor_idx ON client_sensors (sensor_id, client_id);

-- The last known state of every sensor that ever reported, registered or not (the
-- consumer tracks unregistered sensors too), so no foreign key to sensors.
CREATE TABLE sensor_state (
    sensor_id        text PRIMARY KEY,
    data             smallint NOT NULL CHECK (data IN (0, 1)),
    changed_at       timestamptz NOT NULL,
    source_partition integer NOT NULL,
    source_offset    bigint NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE sensor_state;
DROP TABLE client_sensors;
DROP TABLE push_targets;
DROP TABLE clients;
DROP TABLE sensors;
