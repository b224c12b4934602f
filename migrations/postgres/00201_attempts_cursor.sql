-- +goose Up
-- The attempt log becomes insert-only (issue 21): the copy to ClickHouse no
-- longer marks each row copied (copied_at: an update per attempt, a dead tuple
-- and an entry in the partial index of uncopied rows), it follows a cursor.
-- Ids are not a cursor (a transaction that took a lower id can commit after one
-- with a higher id has been copied), so each row carries the transaction that
-- wrote it (xid, as PgQ and PgQue do) and the cursor is a pair of snapshots: a
-- copy takes the rows whose transaction is visible in the target snapshot and
-- was not in the previous one, in id order, a batch at a time (last_id), then
-- moves previous to target. Rows written while a copy ran commit after its
-- target and fall in the next window; none is skipped, none copied twice
-- except after a crash between the ClickHouse insert and the commit
-- (ClickHouse dedupes by attempt_id, as before).
ALTER TABLE delivery_attempts ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
-- Rows copied already: frozen (visible in the first window's previous snapshot).
UPDATE delivery_attempts SET xid = '2' WHERE copied_at IS NOT NULL;
ALTER TABLE delivery_attempts DROP COLUMN copied_at;
CREATE INDEX delivery_attempts_xid_idx ON delivery_attempts (xid);

-- One cursor per copy (name 'clickhouse'); target NULL between windows.
CREATE TABLE attempt_copy_cursors (
    name     text PRIMARY KEY,
    previous pg_snapshot NOT NULL,
    target   pg_snapshot,
    last_id  bigint NOT NULL DEFAULT 0
);
INSERT INTO attempt_copy_cursors (name, previous) VALUES ('clickhouse', '3:3:');

-- +goose Down
DROP TABLE attempt_copy_cursors;
ALTER TABLE delivery_attempts ADD COLUMN copied_at timestamptz;
UPDATE delivery_attempts SET copied_at = now();
CREATE INDEX delivery_attempts_uncopied_idx ON delivery_attempts (id) WHERE copied_at IS NULL;
DROP INDEX delivery_attempts_xid_idx;
ALTER TABLE delivery_attempts DROP COLUMN xid;
