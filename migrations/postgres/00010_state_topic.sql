-- +goose Up
-- The Kafka topic id of the reading that set a sensor's state. A topic deleted and
-- created again under the same name has a new id and starts its offsets at 0, so a
-- position (partition, offset) only orders readings of the same topic id. NULL for
-- states stored before this column, or from a broker that sends no topic ids.
ALTER TABLE sensor_state ADD COLUMN source_topic_id uuid;

-- +goose Down
ALTER TABLE sensor_state DROP COLUMN source_topic_id;
