-- +goose Up
-- Every attempt at a delivery, written by FinishDeliveries in the same statement
-- as the outcome it led to, so the attempt log and the delivery never disagree
-- (docs/DESIGN.md "Delivery"). Postgres holds the truth that the API reads; the
-- retrier copies the rows to ClickHouse's delivery_attempts in batches for
-- analysts, marking each copied (copied_at), and ClickHouse dedupes a batch
-- copied twice by attempt_id.

-- lockstream_month_partition creates the month partition of a table partitioned
-- by month (RANGE on a timestamptz) that holds month (any time in it), unless it
-- exists, and returns its name: <table>_YYYYMM, months in UTC. `lockstream
-- maintain` calls it to make partitions ahead.
-- +goose StatementBegin
CREATE FUNCTION lockstream_month_partition(tbl text, month timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    first timestamptz := date_trunc('month', month AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    name  text := tbl || '_' || to_char(first AT TIME ZONE 'UTC', 'YYYYMM');
BEGIN
    EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                   name, tbl, first, first + interval '1 month');
    RETURN name;
END
$$;
-- +goose StatementEnd

-- No foreign key to deliveries: month partitions of both drop whole, together.
CREATE TABLE delivery_attempts (
    id             bigint GENERATED ALWAYS AS IDENTITY,
    delivery_id    uuid NOT NULL,
    client_id      uuid,
    sensor_id      text,
    event_id       text,
    channel        text NOT NULL,
    attempt        integer NOT NULL,
    -- The state the attempt left the delivery in; for an outcome fenced off
    -- (recorded false: the lease had run out and the delivery moved on), the
    -- state the attempt asked for.
    status         text NOT NULL,
    recorded       boolean NOT NULL,
    http_status    integer NOT NULL DEFAULT 0,
    error_type     text NOT NULL DEFAULT '',
    error          text NOT NULL DEFAULT '',
    answer_code    integer NOT NULL DEFAULT 0,
    answer_message text NOT NULL DEFAULT '',
    duration_ms    integer NOT NULL DEFAULT 0,
    at             timestamptz NOT NULL,
    -- When the row was copied to ClickHouse; NULL until then.
    copied_at      timestamptz,
    PRIMARY KEY (id, at)
) PARTITION BY RANGE (at);

-- GET /v1/deliveries/{id}: a delivery's attempts.
CREATE INDEX delivery_attempts_delivery_idx ON delivery_attempts (delivery_id, id);
-- The copy to ClickHouse walks only the rows not copied yet.
CREATE INDEX delivery_attempts_uncopied_idx ON delivery_attempts (id) WHERE copied_at IS NULL;

-- A time outside every month partition (maintain stopped for months, a clock far
-- off) lands here rather than failing the outcome's statement.
CREATE TABLE delivery_attempts_default PARTITION OF delivery_attempts DEFAULT;
-- This month and the next three; `lockstream maintain` keeps creating them ahead.
SELECT lockstream_month_partition('delivery_attempts', now() + make_interval(months => m)) FROM generate_series(0, 3) AS m;

-- +goose Down
DROP TABLE delivery_attempts;
DROP FUNCTION lockstream_month_partition(text, timestamptz);
