-- +goose Up
-- Routing per member (docs/DESIGN.md "Routing per member"): the sites and
-- sensors a member hears of (NULL: every one) and the least severity it hears.
-- A message about a sensor passes when its severity is at least the minimum
-- and, if the member names sites or sensors, the sensor is one of them or lies
-- in one of the sites; a message about no sensor (a notice) passes on its
-- severity alone. Metadata-only (constant defaults).
ALTER TABLE members ADD COLUMN routing_sites text[];
ALTER TABLE members ADD COLUMN routing_sensors text[];
ALTER TABLE members ADD COLUMN routing_min_severity text NOT NULL DEFAULT 'info'
    CHECK (routing_min_severity IN ('info', 'warning', 'critical'));

-- lockstream_routes(member, sensor, site, severity) is the one definition of
-- the rule above, for every statement that chooses who hears a message (the
-- fan-out's inbox write, notices, incident reminders): a plain SQL function,
-- inlined by the planner into the caller's join, so the filter stays
-- set-based. site is the message's site (a site event's, or its sensor's);
-- sensor NULL or '' is a message about no sensor.
-- +goose StatementBegin
CREATE FUNCTION lockstream_routes(m members, sensor text, site text, severity text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_position(ARRAY['info', 'warning', 'critical'], severity)
               >= array_position(ARRAY['info', 'warning', 'critical'], m.routing_min_severity)
       AND (coalesce(sensor, '') = ''
            OR (m.routing_sites IS NULL AND m.routing_sensors IS NULL)
            OR coalesce(sensor = ANY (m.routing_sensors), false)
            OR coalesce(site = ANY (m.routing_sites), false))
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION lockstream_routes(members, text, text, text);
ALTER TABLE members DROP COLUMN routing_min_severity;
ALTER TABLE members DROP COLUMN routing_sensors;
ALTER TABLE members DROP COLUMN routing_sites;
