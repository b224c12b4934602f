-- +goose Up
-- Escalation rounds that write per member, not per episode (docs/DESIGN.md
-- "Escalation of unseen messages"): a round no longer marks each episode it
-- handled; it moves each member's cursors instead.

-- Per member, the first_seq up to which its episodes are handled by email and
-- by push: an episode whose first_seq is at most the cursor is escalated (or
-- was judged and skipped). Inbox seqs rise per member in commit order (inbox
-- writes lock the member), so an episode opened after a round has a first_seq
-- above every cursor that round set.
CREATE TABLE escalation_members (
    member_id uuid PRIMARY KEY REFERENCES members (id) ON DELETE CASCADE,
    email_seq bigint NOT NULL DEFAULT 0,
    push_seq  bigint NOT NULL DEFAULT 0
);

-- Where a round's scan of the episodes starts: every episode opened at or
-- before it is handled on both channels. '-infinity' lets the first round
-- see the episodes of rounds before this table (their email_at / push_at
-- still count as handled).
CREATE TABLE escalation_floor (
    only_row     boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    opened_after timestamptz NOT NULL
);
INSERT INTO escalation_floor (opened_after) VALUES ('-infinity');

-- Rounds no longer set email_at / push_at, so the partial indexes would hold
-- every episode: one index on opened_at replaces them (the round scans it
-- from the floor), and the inbox writes keep one index less.
DROP INDEX escalation_episodes_email_idx;
DROP INDEX escalation_episodes_push_idx;
DROP INDEX escalation_episodes_critical_idx;
CREATE INDEX escalation_episodes_opened_idx ON escalation_episodes (opened_at);

-- A round's email ('round') and push ('push') name the member and the range
-- of first_seq of the episodes they escalate; what they say is read when sent.
ALTER TABLE member_emails DROP CONSTRAINT member_emails_kind_check;
ALTER TABLE member_emails ADD CONSTRAINT member_emails_kind_check
    CHECK (kind IN ('unseen', 'digest', 'message', 'round', 'push'));

-- +goose Down
ALTER TABLE member_emails DROP CONSTRAINT member_emails_kind_check;
ALTER TABLE member_emails ADD CONSTRAINT member_emails_kind_check CHECK (kind IN ('unseen', 'digest', 'message'));
DROP INDEX escalation_episodes_opened_idx;
CREATE INDEX escalation_episodes_email_idx ON escalation_episodes (opened_at) WHERE email_at IS NULL;
CREATE INDEX escalation_episodes_push_idx ON escalation_episodes (opened_at) WHERE push_at IS NULL;
CREATE INDEX escalation_episodes_critical_idx ON escalation_episodes (critical_at)
    WHERE critical_at IS NOT NULL AND (email_at IS NULL OR push_at IS NULL);
DROP TABLE escalation_floor;
DROP TABLE escalation_members;
