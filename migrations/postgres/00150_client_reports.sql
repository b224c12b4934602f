-- +goose Up
-- The weekly report mailed to a client (docs/DESIGN.md "Analytics", the
-- weekly report): opted in per client, in the client's time zone.
ALTER TABLE clients ADD COLUMN report_weekly boolean NOT NULL DEFAULT false;
ALTER TABLE clients ADD COLUMN report_timezone text NOT NULL DEFAULT 'UTC';
CREATE INDEX clients_report_weekly_idx ON clients (id) WHERE report_weekly;

-- One row per (client, reported week), written with its email delivery in one
-- statement: the key is what makes a week's report go out once, whatever the
-- number of maintainers or their restarts (a second insert of the week does
-- nothing, and so inserts no delivery). The mail is rendered when the week is
-- closed and kept here; the retrier reads it by delivery_id when it sends.
CREATE TABLE client_reports (
    client_id   uuid NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    -- The local date of the Monday the reported week starts on.
    week        date NOT NULL,
    timezone    text NOT NULL,
    delivery_id uuid NOT NULL UNIQUE,
    -- Monday 08:00 local after the week: the delivery's event_at.
    due_at      timestamptz NOT NULL,
    subject     text NOT NULL,
    text_body   text NOT NULL,
    html_body   text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (client_id, week)
);

-- +goose Down
DROP TABLE client_reports;
DROP INDEX clients_report_weekly_idx;
ALTER TABLE clients DROP COLUMN report_timezone;
ALTER TABLE clients DROP COLUMN report_weekly;
