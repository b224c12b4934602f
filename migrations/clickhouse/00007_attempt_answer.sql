-- The receiver's own code and message from its answer body (Swrve's
-- {"code":200,"message":"OK"}), kept with each attempt: 0 and '' when the
-- answer had none. One column per statement: 18.16 has no
-- ADD COLUMN IF NOT EXISTS, and the runner takes "already exists" from a
-- single-column ADD as applied.
ALTER TABLE delivery_attempts ADD COLUMN answer_code Int32 DEFAULT 0;
ALTER TABLE delivery_attempts ADD COLUMN answer_message String DEFAULT '';
