-- +goose Up
-- Fleet judgement, step 3: sites. A sensor may name its site; when enough of a
-- site is lost at once the heartbeat opens one site_outage (the partial unique
-- index allows one open outage per site, so heartbeat processes racing for the
-- same site open it once), publishes it and, when more than half are back,
-- site_restored. published_at / restore_published_at stay NULL until the event
-- is on Kafka, so a process that dies in between is covered by the next sweep.
-- notifications of site events keep the site and the sensors they list.
ALTER TABLE sensors ADD COLUMN site text CHECK (site ~ '^[A-Za-z0-9_.-]{1,64}$');
CREATE INDEX sensors_site_idx ON sensors (site, id) WHERE site IS NOT NULL;
CREATE TABLE site_outages (
    id                   text PRIMARY KEY,
    site                 text NOT NULL,
    started_at           timestamptz NOT NULL,
    sensors              text[] NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    published_at         timestamptz,
    restored_at          timestamptz,
    restore_published_at timestamptz
);
CREATE UNIQUE INDEX site_outages_open_idx ON site_outages (site) WHERE restored_at IS NULL;
ALTER TABLE notifications ADD COLUMN site text;
ALTER TABLE notifications ADD COLUMN sensors text[];

-- +goose Down
ALTER TABLE notifications DROP COLUMN sensors;
ALTER TABLE notifications DROP COLUMN site;
DROP TABLE site_outages;
DROP INDEX sensors_site_idx;
ALTER TABLE sensors DROP COLUMN site;
