-- +goose Up
-- Member tokens expire when idle (LOCKSTREAM_MEMBER_TOKEN_IDLE, default 60d; the
-- autopush seed drops clients idle 30–60 days). token_used_at is the token's
-- last recorded use: set at creation and rotation, and moved by an
-- authentication at most once an hour (not per request), in the statement
-- that looks the token up. Existing members start their idle time now.
ALTER TABLE members ADD COLUMN token_used_at timestamptz NOT NULL DEFAULT now();

-- +goose Down
ALTER TABLE members DROP COLUMN token_used_at;
