-- +goose Up
-- The members whose routing filters anything (a minimum severity above info,
-- or a list of sites or sensors), by client. A member not in it hears every
-- message (lockstream_routes is true for any severity, sensor and site), so
-- the fan-out's check that every member of a client is routed to an event (a
-- shared inbox message) reads only these: for 10,000 members with the default
-- routing it read and filtered all 10,000 (9 ms an event). The predicate is
-- storage.MemberRoutingRestricts; a query must repeat it for the planner to
-- use the index.
CREATE INDEX members_routing_restricted_idx ON members (client_id)
    WHERE routing_min_severity <> 'info' OR routing_sites IS NOT NULL OR routing_sensors IS NOT NULL;

-- +goose Down
DROP INDEX members_routing_restricted_idx;
