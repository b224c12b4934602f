-- +goose Up
-- Quiet hours per member (docs/DESIGN.md "Quiet hours"): wall-clock times
-- HH:MM in the member's timezone; from after to spans midnight. While they
-- last, the member's non-critical pushes and emails wait; NULL: none.
ALTER TABLE members ADD COLUMN quiet_from text;
ALTER TABLE members ADD COLUMN quiet_to text;
ALTER TABLE members ADD CONSTRAINT members_quiet_hours_check CHECK (
    (quiet_from IS NULL) = (quiet_to IS NULL)
    AND (quiet_from IS NULL OR (quiet_from ~ '^([01][0-9]|2[0-3]):[0-5][0-9]$'
                                AND quiet_to ~ '^([01][0-9]|2[0-3]):[0-5][0-9]$' AND quiet_from <> quiet_to)));

-- +goose Down
ALTER TABLE members DROP CONSTRAINT members_quiet_hours_check;
ALTER TABLE members DROP COLUMN quiet_to;
ALTER TABLE members DROP COLUMN quiet_from;
