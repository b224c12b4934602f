-- +goose Up
-- A free-form notification sent with "email": true mails each addressed member
-- that has an address: a member email of kind 'message' names the one inbox
-- message it carries (from_seq, to_seq], rendered when it is sent.
ALTER TABLE member_emails DROP CONSTRAINT member_emails_kind_check;
ALTER TABLE member_emails ADD CONSTRAINT member_emails_kind_check CHECK (kind IN ('unseen', 'digest', 'message'));

-- +goose Down
DELETE FROM member_emails WHERE kind = 'message';
ALTER TABLE member_emails DROP CONSTRAINT member_emails_kind_check;
ALTER TABLE member_emails ADD CONSTRAINT member_emails_kind_check CHECK (kind IN ('unseen', 'digest'));
