package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/event"
)

// InboxChannel is the Postgres NOTIFY channel every inbox write announces its
// new messages on, in the writing transaction: listeners hear of them only once
// they are committed. A payload is a comma-separated list of
// "<member id>:<newest seq>", at most 120 pairs (120 × (36 + 1 + 19 + 1) bytes,
// under Postgres's 8000-byte limit); a write for many members sends several.
const InboxChannel = "lockstream_inbox"

// The causes of a message.
const (
	// CauseEvent is a message put in the inbox as it happened.
	CauseEvent = "event"
	// CauseNewMember is a recent message copied into the inbox of a new member.
	CauseNewMember = "new_member"
)

// ErrSeqAhead is returned when a member acknowledges a seq its inbox has not
// reached.
var ErrSeqAhead = errors.New("seq is beyond the newest message")

// InboxMessage is one message of a member's inbox.
type InboxMessage struct {
	ID       string
	MemberID string
	// Seq is the member's own counter: 1, 2, 3… in the order messages reached the
	// inbox.
	Seq      int64
	ClientID string
	Type     string
	// SensorID is empty for a free-form notification; SensorAddress is the
	// sensor's address now, empty when it was deleted.
	SensorID      string
	SensorAddress string
	// SensorSite is the sensor's site now, empty when it has none (or was
	// deleted): a site event's message names it.
	SensorSite string
	Data       *int
	Previous   *int
	// At is when the event happened; for a free-form notification, its
	// FreeFormNotification.At (the AMQP timestamp), else when it was recorded.
	At       time.Time
	Severity string
	Cause    string
	// Subject and Message are set for free-form notifications; Message is the
	// JSON value given (nil when none).
	Subject string
	Message json.RawMessage
	// SeenAt is nil while the message is unseen.
	SeenAt    *time.Time
	CreatedAt time.Time
}

// inboxColumns are selected by every message query (m = inbox_messages, s =
// sensors LEFT JOINed), in scanInboxMessage's order.
const inboxColumns = `m.id::text, m.member_id::text, m.seq, m.client_id::text, m.type, coalesce(m.sensor_id, ''),
	coalesce(s.address, ''), m.data, m.previous, m.event_at, m.severity, m.cause, coalesce(m.subject, ''), m.message,
	m.seen_at, m.created_at, coalesce(s.site, '')`

func scanInboxMessage(row pgx.Row, extra ...any) (InboxMessage, error) {
	var (
		m              InboxMessage
		data, previous *int16
		message        []byte
	)
	dest := append(extra, &m.ID, &m.MemberID, &m.Seq, &m.ClientID, &m.Type, &m.SensorID, &m.SensorAddress,
		&data, &previous, &m.At, &m.Severity, &m.Cause, &m.Subject, &message, &m.SeenAt, &m.CreatedAt, &m.SensorSite)
	if err := row.Scan(dest...); err != nil {
		return InboxMessage{}, err
	}
	m.Data, m.Previous = outboxIntPtr(data), outboxIntPtr(previous)
	if message != nil {
		m.Message = json.RawMessage(message)
	}
	return m, nil
}

// inboxWrite completes an inbox write. It follows a CTE t (member_id, client_id,
// notification_id, type, sensor_id, data, previous, event_at, severity, cause,
// subject, message, ord) of the messages to add, ord ordering each member's
// messages, and in the same statement:
//   - locks the member_inbox rows of the members concerned in member-id order
//     (so concurrent writers never deadlock) and moves each last_seq on by the
//     member's count: seqs are taken under the lock and committed with the
//     messages, so they have no gap and no duplicate whatever the number of
//     writers;
//   - inserts the messages with seqs base+1, base+2… in ord order;
//   - opens or joins each member's escalation episode of the messages' sensor
//     (or free-form type): episodeWrite.
//
// A member deleted meanwhile has no member_inbox row and gets nothing. What
// follows it announces the messages on InboxChannel: inboxWriteRows (the writer
// then calls notifyInbox) or inboxWriteCount.
const inboxWrite = `
), c AS (
	SELECT member_id, count(*) AS n FROM t GROUP BY member_id
), locked AS MATERIALIZED (
	SELECT mi.member_id FROM member_inbox mi
	WHERE mi.member_id IN (SELECT member_id FROM c)
	ORDER BY mi.member_id
	FOR UPDATE
), bumped AS (
	UPDATE member_inbox mi SET last_seq = mi.last_seq + c.n
	FROM c JOIN locked l ON l.member_id = c.member_id
	WHERE mi.member_id = c.member_id
	RETURNING mi.member_id, mi.last_seq - c.n AS base, mi.last_seq
), ins AS (
	INSERT INTO inbox_messages (member_id, seq, id, client_id, notification_id, type, sensor_id, data, previous,
	                            event_at, severity, cause, subject, message)
	SELECT t.member_id, b.base + row_number() OVER (PARTITION BY t.member_id ORDER BY t.ord), lockstream_uuid_v7(),
	       t.client_id, t.notification_id, t.type, t.sensor_id, t.data, t.previous, t.event_at, t.severity, t.cause,
	       t.subject, t.message
	FROM t JOIN bumped b ON b.member_id = t.member_id
	RETURNING *
)` + episodeWrite + `
`

// inboxWriteRows ends an inbox write by returning the messages added, with their
// sensor's address, for notifyInbox (inboxPayloads reads them in this order).
const inboxWriteRows = inboxWrite + `SELECT ` + inboxRowColumns + `
	FROM ins m LEFT JOIN sensors s ON s.id = m.sensor_id
	ORDER BY m.notification_id, m.member_id`

// eventWriteRows is inboxWriteRows for the fan-out's event messages: in the
// same statement, a digest member (who gets no episode email) with an address
// gets an email at once for each sensor it got a critical message about (an
// episode email from that message on, as the escalation round queues them),
// and the retriers are woken for it on commit. A critical message is never
// held for a digest (DESIGN.md "Quiet hours").
const eventWriteRows = inboxWrite + `, crit AS MATERIALIZED (
	SELECT lockstream_uuid_v7() AS id, i.member_id, i.client_id, i.sensor_id, i.seq
	FROM (SELECT DISTINCT ON (member_id, sensor_id) member_id, client_id, sensor_id, seq FROM ins
	      WHERE severity = 'critical' AND sensor_id IS NOT NULL ORDER BY member_id, sensor_id, seq) i
	JOIN members mb ON mb.id = i.member_id
	WHERE mb.preferences ->> 'email' = 'digest' AND coalesce(mb.email, '') <> ''
), crit_mail AS (
	INSERT INTO deliveries (id, client_id, sensor_id, event_type, channel, target, state, next_attempt_at, event_at)
	SELECT id, client_id, sensor_id, 'unseen', 'email', 'member:' || member_id, 'PENDING', now(), now() FROM crit
), crit_list AS (
	INSERT INTO member_emails (delivery_id, event_at, member_id, kind, key, from_seq, to_seq)
	SELECT id, now(), member_id, 'unseen', sensor_id, seq - 1, NULL FROM crit
), woke AS (
	SELECT count(pg_notify('` + OutboxChannel + `', 'email')) AS n FROM (SELECT 1 FROM crit LIMIT 1) x
)
SELECT ` + inboxRowColumns + `
	FROM ins m LEFT JOIN sensors s ON s.id = m.sensor_id CROSS JOIN woke
	ORDER BY m.notification_id, m.member_id`

// inboxRowColumns are what inboxWriteRows returns of each message: the
// notification it belongs to and the columns of inboxColumns (m = the inserted
// rows).
const inboxRowColumns = `coalesce(m.notification_id::text, ''), ` + inboxColumns

// inboxWriteCount ends an inbox write by NOTIFYing pointers (<member id>:<newest
// seq>, 120 a payload) in SQL and answering how many messages it added; the
// count of notified forces the NOTIFYs to run.
const inboxWriteCount = InboxWriteNotified + `
SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM notified)`

// InboxWriteNotified is an inbox write (inboxWrite: seqs, messages, episodes)
// for a statement of another box that puts messages in inboxes (the incident
// reminders): it follows the statement's CTE t (inboxWrite's columns) and ends
// with the CTE notified, which NOTIFYs pointers (<member id>:<newest seq>, 120
// a payload) on InboxChannel. The statement's final SELECT must read notified
// (count(*)) for the NOTIFYs to run, and may count ins, the messages added.
const InboxWriteNotified = inboxWrite + `, notified AS (
	SELECT pg_notify('` + InboxChannel + `', string_agg(member_id::text || ':' || last_seq, ','))
	FROM (SELECT member_id, last_seq, (row_number() OVER () - 1) / 120 AS chunk FROM bumped) x
	GROUP BY chunk
)`

// eventSeverity is the severity of a sensor event's message, as
// event.SeverityOf grades it (a test checks they agree): a connection lost
// while unlocked, or an unlock longer than open_alert_after, is critical;
// another loss, a site outage, a failing or disabled endpoint a warning;
// anything else info.
const eventSeverity = `CASE WHEN %[1]s.type = 'sensor_open_too_long' THEN 'critical'
	WHEN %[1]s.type = 'connection_lost' AND %[1]s.data = 0 THEN 'critical'
	WHEN %[1]s.type IN ('connection_lost', 'site_outage', 'endpoint_failing', 'endpoint_disabled') THEN 'warning'
	ELSE 'info' END`

// newNotification is a notification a fan-out batch created, for the inbox write
// of its members.
type newNotification struct {
	id, clientID string
	event        int // index in the batch's events, which orders the messages
}

// queueEventMessages queues the statement that puts one message per member of
// each new notification's client whose routing lets it through
// (lockstream_routes) into the members' inboxes, one statement whatever the
// number of members, inside the fan-out's transaction; the
// messages it added are stored in added when the batch's results arrive (the
// caller announces them: notifyInbox).
func queueEventMessages(b *pgx.Batch, events []NotificationInput, created []newNotification, added *[]addedMessage) {
	if len(created) == 0 {
		return
	}
	var (
		ids      = make([]string, len(created))
		clients  = make([]string, len(created))
		types    = make([]string, len(created))
		sensors  = make([]string, len(created))
		data     = make([]*int16, len(created))
		previous = make([]*int16, len(created))
		times    = make([]time.Time, len(created))
		ords     = make([]int, len(created))
		subjects = make([]*string, len(created))
		messages = make([]*string, len(created))
		sites    = make([]string, len(created))
	)
	for i, n := range created {
		e := events[n.event]
		ids[i], clients[i], ords[i] = n.id, n.clientID, n.event
		types[i], sensors[i], times[i] = e.Type, e.SensorID, e.At
		data[i], previous[i] = outboxInt16Ptr(e.Data), outboxInt16Ptr(e.Previous)
		subjects[i], messages[i] = outageMessage(e)
		sites[i] = e.Site
	}
	queueQuery(b, "inserting inbox messages", `
		WITH nn AS (
			SELECT x.*, `+fmt.Sprintf(eventSeverity, "x")+` AS severity,
			       -- The message's site: a site event's, or its sensor's.
			       coalesce(nullif(x.site, ''), (SELECT s.site FROM sensors s WHERE s.id = x.sensor_id)) AS msg_site
			FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::int2[], $6::int2[],
			            $7::timestamptz[], $8::int[], $9::text[], $10::text[], $11::text[])
				AS x (notification_id, client_id, type, sensor_id, data, previous, event_at, ord, subject, message, site)
		), t AS (
			SELECT m.id AS member_id, nn.client_id, nn.notification_id, nn.type, nn.sensor_id, nn.data, nn.previous,
			       nn.event_at, nn.severity, 'event' AS cause, nn.subject, nn.message::jsonb AS message, nn.ord
			FROM nn JOIN members m ON m.client_id = nn.client_id
			-- Each member hears only what its routing lets through.
			WHERE `+MemberRoutes("m", "nn.sensor_id", "nn.msg_site", "nn.severity")+`
		`+eventWriteRows, func(rows pgx.Rows) error {
		var err error
		*added, err = collectAdded(rows)
		return err
	}, ids, clients, types, sensors, data, previous, times, ords, subjects, messages, sites)
}

// outageMessage is the subject and message (JSON) of a connection_restored's
// inbox message that knows how long its sensor was lost: "back after 2 h
// 14 min" and {"lost_since":…,"silent_seconds":…}; nil for other events.
func outageMessage(e NotificationInput) (subject, message *string) {
	if e.Type != string(event.ConnectionRestored) || e.LostSince == nil {
		return nil, nil
	}
	silent := event.SilentSeconds(e.LostSince, e.At)
	s := "back after " + event.Outage(silent)
	m := fmt.Sprintf(`{"lost_since":%q,"silent_seconds":%d}`, e.LostSince.UTC().Format(time.RFC3339Nano), silent)
	return &s, &m
}

// addedMessage is a message an inbox write added, with the notification it
// belongs to ("" for a free-form one).
type addedMessage struct {
	InboxMessage
	notification string
}

func collectAdded(rows pgx.Rows) ([]addedMessage, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (addedMessage, error) {
		var a addedMessage
		m, err := scanInboxMessage(row, &a.notification)
		a.InboxMessage = m
		return a, err
	})
}

// Backfill says which of a client's recent messages a new member receives: those
// of the last Window, at most Max of them (the newest). A zero Max gives none.
type Backfill struct {
	Window time.Duration
	Max    int
}

// BackfillInbox copies into the new member's inbox the client's notifications of
// the last b.Window, the newest b.Max of them, oldest first, unseen, with cause
// new_member. It runs in the member's creating transaction (registry's
// CreateMember), so a notification
// is either copied here or written by the fan-out, never both: the fan-out sees
// the member only once this transaction committed, and this one sees only
// notifications committed before it.
func BackfillInbox(ctx context.Context, tx pgx.Tx, memberID, clientID string, b Backfill) (int, error) {
	if b.Max <= 0 || b.Window <= 0 {
		return 0, nil
	}
	var added, notified int
	err := tx.QueryRow(ctx, `
		WITH src AS (
			SELECT n.id, n.client_id, n.type, n.sensor_id, n.data, n.previous, n.event_at, n.created_at
			FROM notifications n
			WHERE n.client_id = $2 AND n.created_at > now() - $3::interval
			ORDER BY n.created_at DESC, n.event_at DESC, n.id DESC
			LIMIT $4
		), t AS (
			SELECT $1::uuid AS member_id, src.client_id, src.id AS notification_id, src.type, src.sensor_id,
			       src.data, src.previous, src.event_at, `+fmt.Sprintf(eventSeverity, "src")+` AS severity,
			       'new_member' AS cause, NULL::text AS subject, NULL::jsonb AS message,
			       row_number() OVER (ORDER BY src.created_at, src.event_at, src.id) AS ord
			FROM src
		`+inboxWriteCount,
		memberID, clientID, b.Window, b.Max).Scan(&added, &notified)
	if err != nil {
		return 0, fmt.Errorf("backfilling the new member's inbox: %w", err)
	}
	return added, nil
}

// FreeFormNotification is a notification that is not about a sensor, from
// another service (POST /v1/notifications, the AMQP bridge): it reaches the
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
// or of each member of its client, in one statement. It returns ErrNotFound when
// the member or client does not exist. A notification with a Key records its key
// in the same transaction, and one whose key is recorded already writes nothing
// and comes back Duplicate: concurrent copies wait on the first one's key and
// see it once it commits (or take its place if it rolls back).
func (p *Postgres) RecordNotification(ctx context.Context, n FreeFormNotification) (RecordedNotification, error) {
	var member, client *string
	switch {
	case n.MemberID != "" && uuid.Validate(n.MemberID) == nil:
		member = &n.MemberID
	case n.ClientID != "" && uuid.Validate(n.ClientID) == nil:
		client = &n.ClientID
	default:
		return RecordedNotification{}, fmt.Errorf("recording a notification for %q%q: %w", n.MemberID, n.ClientID, ErrNotFound)
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
			return ErrNotFound
		}
		rows, err := tx.Query(ctx, `
			WITH t AS (
				SELECT m.id AS member_id, m.client_id, NULL::uuid AS notification_id, $3::text AS type,
				       NULL::text AS sensor_id, NULL::int2 AS data, NULL::int2 AS previous,
				       coalesce($6::timestamptz, now()) AS event_at,
				       'info' AS severity, 'event' AS cause, $4::text AS subject, $5::jsonb AS message, 1 AS ord
				FROM members m
				WHERE ($1::uuid IS NOT NULL AND m.id = $1) OR ($2::uuid IS NOT NULL AND m.client_id = $2)
			`+inboxWriteRows,
			member, client, n.Type, n.Subject, message, at)
		if err != nil {
			return err
		}
		added, err := collectAdded(rows)
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
		return notifyInbox(ctx, tx, added)
	})
	if err != nil {
		return RecordedNotification{}, fmt.Errorf("recording a %s notification: %w", n.Type, mapError(err))
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
		if err := notifyOutbox(ctx, tx, map[Channel]int{ChannelEmail: queued}); err != nil {
			return 0, err
		}
	}
	return queued, nil
}

// InboxSort is a field messages can be listed by.
type InboxSort string

// The sort fields of GET /v1/messages.
const (
	SortTimestamp InboxSort = "timestamp"
	SortType      InboxSort = "type"
	SortSensor    InboxSort = "sensor"
	// SortID orders by message id, a UUIDv7: by arrival (the v1 API's uuid).
	SortID InboxSort = "id"
	// SortSubject orders by the stored subject: a free-form notification's;
	// sensor events have none and come last ascending, first descending.
	SortSubject InboxSort = "subject"
)

// inboxOrder maps each sort field to its ORDER BY column; seq breaks ties.
var inboxOrder = map[InboxSort]string{
	SortTimestamp: "m.event_at",
	SortType:      "m.type",
	SortSensor:    "m.sensor_id",
	SortID:        "m.id",
	SortSubject:   "m.subject",
}

// InboxQuery selects and orders a member's messages. Deleted messages are never
// listed.
type InboxQuery struct {
	MemberID string
	// IncludeSeen lists seen messages too; by default only unseen ones.
	IncludeSeen bool
	// SeenOnly lists seen messages only (IncludeSeen is then ignored).
	SeenOnly bool
	// Type keeps only messages of that type; empty keeps all.
	Type       string
	Sort       InboxSort
	Descending bool
	// Limit and Offset select the page; a Limit of 0 lists every match from
	// Offset on. CountOnly reads no message at all.
	Limit     int
	Offset    int
	CountOnly bool
}

// ListInbox returns how many messages match q (all of them, not the page) and,
// unless q.CountOnly, the page. Both read only the member's entries of a partial
// index (unseen, or not deleted), so they cost what the member's inbox holds,
// whatever the table's size; they go in one round trip.
func (p *Postgres) ListInbox(ctx context.Context, q InboxQuery) (int, []InboxMessage, error) {
	order, ok := inboxOrder[q.Sort]
	if !ok {
		return 0, nil, fmt.Errorf("listing messages: unknown sort field %q", q.Sort)
	}
	if uuid.Validate(q.MemberID) != nil {
		return 0, nil, fmt.Errorf("listing messages of %s: %w", q.MemberID, ErrNotFound)
	}
	where := `m.member_id = $1 AND m.deleted_at IS NULL AND ($2 = '' OR m.type = $2)`
	switch {
	case q.SeenOnly:
		where += ` AND m.seen_at IS NOT NULL`
	case !q.IncludeSeen:
		where += ` AND m.seen_at IS NULL`
	}
	var limit *int // LIMIT NULL is no limit
	if q.Limit > 0 {
		limit = &q.Limit
	}
	batch := &pgx.Batch{}
	var total int
	batch.Queue(`SELECT count(*) FROM inbox_messages m WHERE `+where, q.MemberID, q.Type).
		QueryRow(func(row pgx.Row) error { return row.Scan(&total) })
	var messages []InboxMessage
	if !q.CountOnly {
		dir := "ASC"
		if q.Descending {
			dir = "DESC"
		}
		batch.Queue(`SELECT `+inboxColumns+` FROM inbox_messages m LEFT JOIN sensors s ON s.id = m.sensor_id
			WHERE `+where+` ORDER BY `+order+` `+dir+`, m.seq `+dir+` LIMIT $3 OFFSET $4`,
			q.MemberID, q.Type, limit, q.Offset).
			Query(func(rows pgx.Rows) error {
				var err error
				messages, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (InboxMessage, error) {
					return scanInboxMessage(row)
				})
				return err
			})
	}
	if err := p.pool.SendBatch(ctx, batch).Close(); err != nil {
		return 0, nil, fmt.Errorf("listing messages of member %s: %w", q.MemberID, err)
	}
	return total, messages, nil
}

// GetInboxMessage returns the member's message id, or ErrNotFound when the member
// has no such message (another member's included) or deleted it.
func (p *Postgres) GetInboxMessage(ctx context.Context, memberID, id string) (InboxMessage, error) {
	if uuid.Validate(memberID) != nil || uuid.Validate(id) != nil {
		return InboxMessage{}, fmt.Errorf("getting message %s: %w", id, ErrNotFound)
	}
	m, err := scanInboxMessage(p.pool.QueryRow(ctx, `SELECT `+inboxColumns+`
		FROM inbox_messages m LEFT JOIN sensors s ON s.id = m.sensor_id
		WHERE m.id = $2 AND m.member_id = $1 AND m.deleted_at IS NULL`, memberID, id))
	if err != nil {
		return InboxMessage{}, fmt.Errorf("getting message %s: %w", id, mapError(err))
	}
	return m, nil
}

// InboxAction is what MarkInbox does to messages.
type InboxAction string

// The actions on messages.
const (
	ActionSeen   InboxAction = "seen"
	ActionUnseen InboxAction = "unseen"
	ActionDelete InboxAction = "delete"
)

// inboxActions maps each action to its SET clause.
var inboxActions = map[InboxAction]string{
	ActionSeen: `seen_at = coalesce(m.seen_at, now())`,
	// A message the member had seen leaves its episode: marking it unseen
	// oneself escalates nothing.
	ActionUnseen: `seen_at = NULL, self_unseen = m.self_unseen OR m.seen_at IS NOT NULL`,
	ActionDelete: `deleted_at = now()`,
}

// MarkInbox applies action to the member's messages ids, or to every message of
// the member when all is set (ids are then ignored), in one statement, and
// returns how many messages it found. Ids of other members' messages, deleted
// messages and ids that are not message ids are skipped.
func (p *Postgres) MarkInbox(ctx context.Context, memberID string, action InboxAction, ids []string, all bool) (int, error) {
	return p.markInbox(ctx, memberID, action, ids, all, "")
}

// MarkAllInbox applies action to every message of the member, or to those of
// type typ when it is not empty, in one statement, and returns how many messages
// it found. Deleted messages are skipped.
func (p *Postgres) MarkAllInbox(ctx context.Context, memberID string, action InboxAction, typ string) (int, error) {
	return p.markInbox(ctx, memberID, action, nil, true, typ)
}

// markInbox is MarkInbox with a type filter ("" for every type).
func (p *Postgres) markInbox(ctx context.Context, memberID string, action InboxAction, ids []string, all bool,
	typ string) (int, error) {
	set, ok := inboxActions[action]
	if !ok {
		return 0, fmt.Errorf("marking messages: unknown action %q", action)
	}
	if uuid.Validate(memberID) != nil {
		return 0, fmt.Errorf("marking messages of %s: %w", memberID, ErrNotFound)
	}
	valid := validUUIDs(ids)
	if !all && len(valid) == 0 {
		return 0, nil
	}
	tag, err := p.pool.Exec(ctx, `UPDATE inbox_messages m SET `+set+`
		WHERE m.member_id = $1 AND m.deleted_at IS NULL AND ($2 OR m.id = ANY ($3::uuid[]))
		  AND ($4 = '' OR m.type = $4)`,
		memberID, all, valid, typ)
	if err != nil {
		return 0, fmt.Errorf("marking messages %s for member %s: %w", action, memberID, err)
	}
	return int(tag.RowsAffected()), nil
}

// InboxState is where a member's inbox stands, for its stream.
type InboxState struct {
	Epoch    string
	AckedSeq int64
	LastSeq  int64
	// FirstSeq is the seq of the oldest message still stored (deleted ones
	// included); 0 when none is. Messages before it are gone (retention).
	FirstSeq int64
}

// GetInboxState returns the member's inbox state, or ErrNotFound.
func (p *Postgres) GetInboxState(ctx context.Context, memberID string) (InboxState, error) {
	if uuid.Validate(memberID) != nil {
		return InboxState{}, fmt.Errorf("reading inbox of %s: %w", memberID, ErrNotFound)
	}
	var s InboxState
	err := p.pool.QueryRow(ctx, `
		SELECT epoch, acked_seq, last_seq,
		       coalesce((SELECT min(seq) FROM inbox_messages WHERE member_id = $1), 0)
		FROM member_inbox WHERE member_id = $1`, memberID).Scan(&s.Epoch, &s.AckedSeq, &s.LastSeq, &s.FirstSeq)
	if err != nil {
		return InboxState{}, fmt.Errorf("reading inbox of %s: %w", memberID, mapError(err))
	}
	return s, nil
}

// AckInbox records that the member's stream received everything up to seq; an
// older seq than the one acknowledged changes nothing. It returns ErrSeqAhead
// (changing nothing) when seq is beyond the newest message, and ErrNotFound for
// an unknown member.
func (p *Postgres) AckInbox(ctx context.Context, memberID string, seq int64) error {
	if uuid.Validate(memberID) != nil {
		return fmt.Errorf("acknowledging for %s: %w", memberID, ErrNotFound)
	}
	var last int64
	err := p.pool.QueryRow(ctx, `
		UPDATE member_inbox
		SET acked_seq = CASE WHEN $2 <= last_seq THEN greatest(acked_seq, $2) ELSE acked_seq END
		WHERE member_id = $1
		RETURNING last_seq`, memberID, seq).Scan(&last)
	switch {
	case err != nil:
		return fmt.Errorf("acknowledging seq %d for %s: %w", seq, memberID, mapError(err))
	case seq > last:
		return fmt.Errorf("acknowledging seq %d for %s (newest %d): %w", seq, memberID, last, ErrSeqAhead)
	}
	return nil
}

// InboxCursor asks for the member's messages after seq After, at most Limit.
type InboxCursor struct {
	MemberID string
	After    int64
	Limit    int
}

// InboxAfter returns, for each cursor, the member's messages after it in seq
// order (deleted ones skipped), in one query whatever the number of cursors.
func (p *Postgres) InboxAfter(ctx context.Context, cursors []InboxCursor) ([][]InboxMessage, error) {
	out := make([][]InboxMessage, len(cursors))
	if len(cursors) == 0 {
		return out, nil
	}
	members := make([]string, len(cursors))
	after := make([]int64, len(cursors))
	limits := make([]int, len(cursors))
	for i, c := range cursors {
		members[i], after[i], limits[i] = c.MemberID, c.After, c.Limit
	}
	rows, err := p.pool.Query(ctx, `
		SELECT w.i, `+inboxColumns+`
		FROM unnest($1::uuid[], $2::bigint[], $3::int[]) WITH ORDINALITY AS w (member_id, after, lim, i)
		CROSS JOIN LATERAL (
			SELECT * FROM inbox_messages x
			WHERE x.member_id = w.member_id AND x.seq > w.after AND x.deleted_at IS NULL
			ORDER BY x.seq LIMIT w.lim
		) m
		LEFT JOIN sensors s ON s.id = m.sensor_id
		ORDER BY w.i, m.seq`, members, after, limits)
	if err != nil {
		return nil, fmt.Errorf("reading messages after cursors: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int
		m, err := scanInboxMessage(rows, &i)
		if err != nil {
			return nil, fmt.Errorf("reading messages after cursors: %w", err)
		}
		out[i-1] = append(out[i-1], m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading messages after cursors: %w", err)
	}
	return out, nil
}

// ListenInbox listens on InboxChannel on a connection of its own (taken out of
// the pool) and calls notice with every payload, parsed, in order, until ctx
// ends (it then returns nil) or the connection fails (it returns the error;
// call it again). ready is called once the LISTEN is in place: a caller that
// missed notifications while not listening must catch up after it.
func (p *Postgres) ListenInbox(ctx context.Context, ready func(), notice func(InboxNews)) error {
	return p.listen(ctx, InboxChannel, "inbox messages", ready, func(payload string) {
		notice(ParseInboxNews(payload))
	})
}

// CreateInboxPartitions makes sure inbox_messages has its month partitions from
// the month of from to months later, and returns their names.
func (p *Postgres) CreateInboxPartitions(ctx context.Context, from time.Time, months int) ([]string, error) {
	rows, err := p.pool.Query(ctx, `
		SELECT lockstream_inbox_partition($1::timestamptz + make_interval(months => m))
		FROM generate_series(0, $2::int) AS m`, from, months)
	if err != nil {
		return nil, fmt.Errorf("creating inbox partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("creating inbox partitions: %w", err)
	}
	return names, nil
}
