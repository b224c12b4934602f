-- +goose Up
-- Issue 21: an index entry fewer on each row of the two logs every webhook
-- writes, each about 80 bytes of WAL and a B-tree insert.
--
-- notifications_client_idx (client_id, created_at) served one statement, a
-- new member's backfill (the client's newest notifications of the last
-- window). The backfill now reads the client's last seqs through
-- notifications_client_seq_idx, which the feed keeps anyway: seqs follow the
-- order notifications are written in, so the newest max by seq are the newest
-- max by creation.
DROP INDEX notifications_client_idx;
-- The attempt log's primary key (id, at) was read by nothing: attempts are
-- read per delivery (delivery_attempts_delivery_idx), per client
-- (delivery_attempts_first_sent_idx) and by the ClickHouse copy's cursor
-- (delivery_attempts_xid_idx); ids come from a sequence and ClickHouse
-- dedupes a copy by id.
ALTER TABLE delivery_attempts DROP CONSTRAINT delivery_attempts_pkey;

-- +goose Down
ALTER TABLE delivery_attempts ADD PRIMARY KEY (id, at);
CREATE INDEX notifications_client_idx ON notifications (client_id, created_at);
