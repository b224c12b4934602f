-- +goose Up
-- Fleet judgement, step 5: maintenance windows of a sensor or of a site. A
-- loss inside a window is notified to nobody; the heartbeat that ends the
-- window (ended_at, set once by an UPDATE … WHERE ended_at IS NULL) publishes
-- one maintenance_ended listing the sensors that went silent inside it
-- (silent). One window not yet ended per sensor and per site: PUT moves it.
CREATE TABLE maintenance_windows (
    id                 uuid PRIMARY KEY,
    sensor_id          text,
    site               text,
    starts_at          timestamptz NOT NULL,
    ends_at            timestamptz NOT NULL,
    silent             text[] NOT NULL DEFAULT '{}',
    created_at         timestamptz NOT NULL DEFAULT now(),
    ended_at           timestamptz,
    ended_published_at timestamptz,
    CHECK ((sensor_id IS NULL) <> (site IS NULL)),
    CHECK (ends_at > starts_at)
);
CREATE UNIQUE INDEX maintenance_sensor_idx ON maintenance_windows (sensor_id) WHERE sensor_id IS NOT NULL AND ended_at IS NULL;
CREATE UNIQUE INDEX maintenance_site_idx ON maintenance_windows (site) WHERE site IS NOT NULL AND ended_at IS NULL;
CREATE INDEX maintenance_due_idx ON maintenance_windows (ends_at) WHERE ended_at IS NULL;

-- +goose Down
DROP TABLE maintenance_windows;
