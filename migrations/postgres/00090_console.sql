-- +goose Up
-- The operator console's two lookups that no existing index serves.

-- Search by sensor id prefix: a range over ids in byte order ([prefix, prefix || '{')
-- holds every id starting with prefix, ids being ASCII letters and digits), whatever
-- the database's collation orders the primary key by.
CREATE INDEX sensors_id_bytes_idx ON sensors (id COLLATE "C");

-- A client's failed deliveries, newest first, without walking past its sent ones:
-- the index holds only the few that failed.
CREATE INDEX deliveries_failed_idx ON deliveries (client_id, id) WHERE state IN ('FAILED', 'GIVEN_UP');

-- +goose Down
DROP INDEX deliveries_failed_idx;
DROP INDEX sensors_id_bytes_idx;
