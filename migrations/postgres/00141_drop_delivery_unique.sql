-- +goose Up
-- deliveries' unique key (notification_id, channel, target, event_at) guarded
-- nothing: the fan-out inserts deliveries only for the notifications its
-- statement has just inserted (notifications are unique per event and client,
-- so a replay inserts none), one per channel and target of the client
-- (push_targets' key makes those distinct), and nothing else inserts deliveries
-- of a notification. It cost three index entries a delivery (its insert, claim
-- and outcome write a new row version each, none of them HOT) and about 520 ms
-- of an escalation round's 200,000 inserts; no query reads by it.
ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_new_notification_id_channel_target_event_at_key;

-- +goose Down
ALTER TABLE deliveries ADD CONSTRAINT deliveries_new_notification_id_channel_target_event_at_key
    UNIQUE (notification_id, channel, target, event_at);
