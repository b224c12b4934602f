-- Every delivery attempt, as the retrier made it. Works on ClickHouse 18.16:
-- DateTime, no TTL, partitioned by month so old months drop whole.
-- status is the state the attempt left the delivery in (SENT, RETRY, FAILED,
-- GIVEN_UP, SUPERSEDED); http_status is 0 when no HTTP answer came back.
CREATE TABLE IF NOT EXISTS delivery_attempts (
    delivery_id String,
    client_id   String,
    sensor_id   String,
    event_id    String,
    channel     String,
    attempt     UInt32,
    status      String,
    http_status UInt16,
    error_type  String,
    error       String,
    duration_ms UInt32,
    at          DateTime
) ENGINE = MergeTree
PARTITION BY toYYYYMM(at)
ORDER BY (delivery_id, at, attempt);
