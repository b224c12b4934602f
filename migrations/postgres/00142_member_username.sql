-- +goose Up
-- A member's optional username: how the CyVerse notification API v1 names a user
-- (?user=, "user" in a body). Unique across every client, not per client: a v1
-- request names a user and nothing else, so one name must find one member
-- (docs/DESIGN.md "CyVerse notification API v1").
ALTER TABLE members ADD COLUMN username text;
CREATE UNIQUE INDEX members_username_idx ON members (username);

-- +goose Down
DROP INDEX members_username_idx;
ALTER TABLE members DROP COLUMN username;
