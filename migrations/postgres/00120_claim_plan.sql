-- +goose Up
-- The retrier's claim picks its due deliveries through this function so that its
-- plan does not depend on fresh statistics. Right after a burst fills a month
-- partition that was never analyzed (autovacuum's first look can be a minute
-- away), the planner believes few rows are due and plans a sort of every due row,
-- running the ordering check (NOT EXISTS) for each of them: about 20,000 probes
-- per claim at 20,000 due (EXPLAIN in storage's TestClaimPlanOnFreshOutbox). With
-- sorting disabled for this one statement, the only ordered path is the walk of
-- each partition's due index, merged (Merge Append), which stops at the limit:
-- the plan the planner picks anyway once statistics exist. A function's SET
-- clause applies to the statements it runs and to nothing else. ROWS 10 tells the
-- planner of the claim's UPDATE that few rows come out (a claim takes at most a
-- batch), so it joins them to deliveries and notifications by primary key rather
-- than reading and sorting a whole unanalyzed partition (the default estimate of
-- a set-returning function is 1,000 rows). PL/pgSQL keeps the statement's plan
-- for the session, as a prepared statement would; a SQL function would plan it
-- again at every claim.
-- Arguments: the time that is due, the most rows, the channels (NULL: all). The rows are locked
-- (FOR UPDATE SKIP LOCKED) until the caller's transaction ends.
-- +goose StatementBegin
CREATE FUNCTION lockstream_due_deliveries(due_at timestamptz, max_rows int, channels text[])
RETURNS TABLE (id uuid, notification_id uuid, event_at timestamptz)
LANGUAGE plpgsql
ROWS 10
SET enable_sort = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT d.id, d.notification_id, d.event_at
    FROM deliveries d
    WHERE d.state IN ('SCHEDULED', 'PENDING', 'RETRY') AND d.next_attempt_at <= due_at
      AND (channels IS NULL OR d.channel = ANY (channels))
      AND NOT EXISTS (
        SELECT 1 FROM deliveries o
        WHERE o.client_id = d.client_id AND o.sensor_id = d.sensor_id
          AND o.channel = d.channel AND o.target = d.target
          AND o.state IN ('PENDING', 'RETRY', 'IN_FLIGHT')
          AND (o.event_at, o.seq) < (d.event_at, d.seq))
    ORDER BY d.next_attempt_at
    LIMIT max_rows
    FOR UPDATE OF d SKIP LOCKED;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION lockstream_due_deliveries(timestamptz, int, text[]);
