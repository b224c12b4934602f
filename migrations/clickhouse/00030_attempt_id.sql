-- The id of the attempt's row in Postgres (delivery_attempts.id), the source of
-- truth: the retrier copies attempts here in batches and a batch copied twice
-- (a crash between the insert and marking it copied) repeats ids, so readers
-- dedupe by it (LIMIT 1 BY attempt_id). 0 on rows written before the copy.
ALTER TABLE delivery_attempts ADD COLUMN attempt_id UInt64 DEFAULT 0;
