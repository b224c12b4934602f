-- +goose Up
-- Reminder rounds that mark a window, not each tier (docs/DESIGN.md
-- "Reminder rounds"): a round moves one cursor and writes one mark; the
-- members are reminded when the mark is sent, a batch of incidents at a time.

-- The reminder cursor: every due time up to to_at belongs to a mark. A round
-- moves it from to_at to its clock in one statement and writes the window
-- (from_at, to_at] as a mark. Intake reads to_at FOR SHARE when it writes
-- tiers (their since), so a round never commits between a tier's reading of
-- the cursor and its commit. '-infinity': the first round covers everything.
CREATE TABLE incident_reminder_cursor (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    from_at  timestamptz NOT NULL,
    to_at    timestamptz NOT NULL
);
INSERT INTO incident_reminder_cursor (from_at, to_at) VALUES ('-infinity', '-infinity');

-- A round's window, still to send: the tiers due in (from_at, to_at] (and,
-- for a tier written since from_at, every due time up to to_at) are reminded
-- by the sender, a batch of incidents at a time in incident id order; after is
-- the last incident sent. A sent mark is deleted.
CREATE TABLE incident_reminder_marks (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    from_at    timestamptz NOT NULL,
    to_at      timestamptz NOT NULL,
    after      uuid,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A tier's next_at is now its first due time, never moved by rounds (NULL:
-- stopped by an ack or a resolve, or past its stop_at once every mark that
-- covers it was sent); since is the cursor's to_at when it was written.
-- Tiers written before this migration start a fresh schedule at their next
-- due time, as new to the first round.
ALTER TABLE incident_tiers ADD COLUMN since timestamptz NOT NULL DEFAULT '-infinity';
ALTER TABLE incident_tiers ALTER COLUMN since DROP DEFAULT;
DROP INDEX incident_tiers_due_idx;
-- The sender walks the live tiers by incident; the round retires those past
-- their stop by stop_at.
CREATE INDEX incident_tiers_live_idx ON incident_tiers (incident_id, tier) WHERE next_at IS NOT NULL;
CREATE INDEX incident_tiers_stop_idx ON incident_tiers (stop_at) WHERE next_at IS NOT NULL;

-- +goose Down
DROP INDEX incident_tiers_stop_idx;
DROP INDEX incident_tiers_live_idx;
CREATE INDEX incident_tiers_due_idx ON incident_tiers (next_at) WHERE next_at IS NOT NULL;
ALTER TABLE incident_tiers DROP COLUMN since;
DROP TABLE incident_reminder_marks;
DROP TABLE incident_reminder_cursor;
