package inbox

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/internal/pgutil"
)

// inbox of one member, or of every member of one client. Its JSON form is the
// body of POST /v1/notifications.
type FreeFormNotification struct {
	// MemberID or ClientID (exactly one) says whose inboxes it reaches.
	MemberID string `json:"member_id,omitempty"`
	ClientID string `json:"client_id,omitempty"`
	// Type is the message type (a word: letters, digits, '_' or '-').
	Type    string `json:"type"`
	Subject string `json:"subject"`
	// Message is any JSON value, or nil.
	Message json.RawMessage `json:"message,omitempty"`
	// Email asks for an email to each addressed member that has an address.
	Email bool `json:"email,omitempty"`
	// Key, when set, makes recording idempotent: a notification whose key was
	// recorded before (and not yet expired by maintain's retention) records
	// nothing. The AMQP bridge sets it from the message-id.
	Key string `json:"-"`
	// At is the message's time (the AMQP timestamp); zero: when it is recorded.
	At time.Time `json:"-"`
}

// Limits of a free-form notification.
const (
	// MaxSubjectLen bounds the subject, in bytes.
	MaxSubjectLen = 1000
	// MaxMessageLen bounds the message's JSON, in bytes: it is stored in every
	// addressed inbox.
	MaxMessageLen = 16 << 10
)

// messageTypeRE is a message type: an event type or a free-form notification's.
var messageTypeRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidMessageType reports whether t can be a message type: 1 to 64 letters,
// digits, '_' or '-' (it is also the last word of an AMQP routing key).
func ValidMessageType(t string) bool { return messageTypeRE.MatchString(t) }

// FieldError names one invalid field of an input and says what is wrong.
type FieldError struct {
	Field  string
	Detail string
}

// Check returns every invalid field of n; none for a notification
// RecordNotification can take.
func (n FreeFormNotification) Check() []FieldError {
	var errs []FieldError
	add := func(field, format string, args ...any) {
		errs = append(errs, FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
	}
	switch {
	case n.ClientID == "" && n.MemberID == "":
		add("member_id", "one of member_id and client_id is required")
	case n.ClientID != "" && n.MemberID != "":
		add("client_id", "give member_id or client_id, not both")
	case n.ClientID != "" && uuid.Validate(n.ClientID) != nil:
		add("client_id", "must be a client id (a UUID), got %q", n.ClientID)
	case n.MemberID != "" && uuid.Validate(n.MemberID) != nil:
		add("member_id", "must be a member id (a UUID), got %q", n.MemberID)
	}
	if !ValidMessageType(n.Type) {
		add("type", "must be 1 to 64 letters, digits, '_' or '-', got %q", n.Type)
	}
	switch {
	case strings.TrimSpace(n.Subject) == "":
		add("subject", "is required")
	case !utf8.ValidString(n.Subject):
		add("subject", "must be valid UTF-8")
	case len(n.Subject) > MaxSubjectLen:
		add("subject", "must be at most %d bytes", MaxSubjectLen)
	}
	if len(n.Message) > MaxMessageLen {
		add("message", "must be at most %d bytes of JSON", MaxMessageLen)
	}
	return errs
}

// RecordedNotification says what RecordNotification did.
type RecordedNotification struct {
	// Messages is the number of inbox messages added (one per member reached).
	Messages int
	// Members lists the members reached, with their message.
	Members []RecordedMessage
	// Emails is the number of emails queued in the outbox.
	Emails int
	// Duplicate is set when the notification's Key was recorded before: nothing
	// was written.
	Duplicate bool
}

// RecordedMessage is one message a free-form notification added.
type RecordedMessage struct {
	MemberID  string
	MessageID string
	Seq       int64
}

// RecordNotification puts a free-form notification into the inbox of its member,
// or of each member of its client, in one statement. It returns domain.ErrNotFound when
// the member or client does not exist. A notification with a Key records its key
// in the same transaction, and one whose key is recorded already writes nothing
// and comes back Duplicate: concurrent copies wait on the first one's key and
// see it once it commits (or take its place if it rolls back).
func (p *PostgresStore) RecordNotification(ctx context.Context, n FreeFormNotification) (RecordedNotification, error) {
	var member, client *string
	switch {
	case n.MemberID != "" && uuid.Validate(n.MemberID) == nil:
		member = &n.MemberID
	case n.ClientID != "" && uuid.Validate(n.ClientID) == nil:
		client = &n.ClientID
	default:
		return RecordedNotification{}, fmt.Errorf("recording a notification for %q%q: %w", n.MemberID, n.ClientID, domain.ErrNotFound)
	}
	var message []byte
	if len(n.Message) > 0 && string(n.Message) != "null" {
		message = n.Message
	}
	var at *time.Time
	if !n.At.IsZero() {
		at = &n.At
	}
	var out RecordedNotification
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		// A copy is a duplicate even if its addressee is gone since: it was
		// recorded, not lost.
		if n.Key != "" {
			tag, err := tx.Exec(ctx, `INSERT INTO notification_keys (key) VALUES ($1) ON CONFLICT DO NOTHING`, n.Key)
			if err != nil {
				return fmt.Errorf("recording the notification's key: %w", err)
			}
			if out.Duplicate = tag.RowsAffected() == 0; out.Duplicate {
				return nil
			}
		}
		// The addressee must exist even when it has no member to reach.
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT CASE WHEN $1::uuid IS NOT NULL THEN EXISTS (SELECT 1 FROM members WHERE id = $1)
			ELSE EXISTS (SELECT 1 FROM clients WHERE id = $2) END`, member, client).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return domain.ErrNotFound
		}
		rows, err := tx.Query(ctx, `
			WITH t AS (
				SELECT m.id AS member_id, m.client_id, NULL::uuid AS notification_id, $3::text AS type,
				       NULL::text AS sensor_id, NULL::int2 AS data, NULL::int2 AS previous,
				       coalesce($6::timestamptz, now()) AS event_at,
				       'info' AS severity, 'event' AS cause, $4::text AS subject, $5::jsonb AS message, 1 AS ord
				FROM members m
				WHERE ($1::uuid IS NOT NULL AND m.id = $1) OR ($2::uuid IS NOT NULL AND m.client_id = $2)
			`+WriteRows,
			member, client, n.Type, n.Subject, message, at)
		if err != nil {
			return err
		}
		added, err := CollectAdded(rows)
		if err != nil {
			return err
		}
		for _, a := range added {
			out.Members = append(out.Members, RecordedMessage{MemberID: a.MemberID, MessageID: a.ID, Seq: a.Seq})
		}
		if n.Email {
			if out.Emails, err = queueNotificationEmails(ctx, tx, n.Type, out.Members); err != nil {
				return err
			}
		}
		return Notify(ctx, tx, added)
	})
	if err != nil {
		return RecordedNotification{}, fmt.Errorf("recording a %s notification: %w", n.Type, pgutil.MapError(err))
	}
	out.Messages = len(out.Members)
	return out, nil
}

// queueNotificationEmails puts one email delivery in the outbox for each
// member reached that has an address, each naming its member's new message
// (a member email of kind message, rendered when sent), in one statement, and
// wakes the retriers when the transaction commits.
func queueNotificationEmails(ctx context.Context, tx pgx.Tx, typ string, reached []RecordedMessage) (int, error) {
	members := make([]string, len(reached))
	seqs := make([]int64, len(reached))
	for i, r := range reached {
		members[i], seqs[i] = r.MemberID, r.Seq
	}
	var queued int
	if err := tx.QueryRow(ctx, `
		WITH mail AS MATERIALIZED (
			SELECT lockstream_uuid_v7() AS id, mb.id AS member_id, mb.client_id, a.seq
			FROM unnest($1::uuid[], $2::bigint[]) AS a (member_id, seq)
			JOIN members mb ON mb.id = a.member_id
			WHERE coalesce(mb.email, '') <> ''
		), d AS (
			INSERT INTO deliveries (id, client_id, sensor_id, event_type, channel, target, state, next_attempt_at, event_at)
			SELECT id, client_id, NULL, $3, 'email', 'member:' || member_id, 'PENDING', now(), now() FROM mail
		), e AS (
			INSERT INTO member_emails (delivery_id, event_at, member_id, kind, key, from_seq, to_seq)
			SELECT id, now(), member_id, 'message', NULL, seq - 1, seq FROM mail
		)
		SELECT count(*) FROM mail`, members, seqs, typ).Scan(&queued); err != nil {
		return 0, fmt.Errorf("queueing notification emails: %w", err)
	}
	if queued > 0 {
		if _, err := tx.Exec(ctx, `SELECT pg_notify('`+outboxChannel+`', 'email')`); err != nil {
			return 0, fmt.Errorf("notifying the outbox: %w", err)
		}
	}
	return queued, nil
}

// outboxChannel is storage.OutboxChannel, on which the retriers hear of new
// deliveries: storage imports this package, so the name is repeated here
// (TestOutboxChannelIsStorages checks they agree). "email" wakes the email lane.
const outboxChannel = "lockstream_outbox"
