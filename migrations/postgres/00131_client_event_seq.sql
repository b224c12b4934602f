-- +goose Up
-- Fleet judgement, step 2: every notification of a client (an event delivered
-- to it) gets the client's next seq, 1, 2, 3… with no gap, so a receiver that
-- missed webhooks pulls what it missed (GET /v1/clients/{id}/events?after=).
-- client_event_seq holds each client's last seq; the fan-out moves it on under
-- the row's lock, held to commit, so seqs commit in order. No foreign key: a
-- deleted client's counter is one dead row, and the fan-out stays free of
-- checks. Notifications from before this migration have no seq.
CREATE TABLE client_event_seq (
    client_id uuid PRIMARY KEY,
    last_seq  bigint NOT NULL CHECK (last_seq >= 0)
);
ALTER TABLE notifications ADD COLUMN client_seq bigint;
CREATE INDEX notifications_client_seq_idx ON notifications (client_id, client_seq) WHERE client_seq IS NOT NULL;

-- +goose Down
DROP INDEX notifications_client_seq_idx;
ALTER TABLE notifications DROP COLUMN client_seq;
DROP TABLE client_event_seq;
