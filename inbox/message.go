// Package inbox owns the members' inboxes: their messages (Message), the
// statements that write them — whole (free-form notifications,
// PostgresStore.RecordNotification) or as fragments other boxes' transactions
// compose (the fan-out's event messages, notices, a new member's backfill, the
// incident reminders) —, the reads, marks and acknowledgements of the API and
// the console, the NOTIFY feed of new messages (Channel, Notify, ParseNews) and
// the hub that feeds the members' live streams from it (Hub). The API's
// handlers write what the hub queues; the episodes the writes open are
// escalation's (EpisodeWrite).
package inbox

import (
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Channel is the Postgres NOTIFY channel every inbox write announces its
// new messages on, in the writing transaction: listeners hear of them only once
// they are committed. A payload is a comma-separated list of
// "<member id>:<newest seq>", at most 120 pairs (120 × (36 + 1 + 19 + 1) bytes,
// under Postgres's 8000-byte limit); a write for many members sends several.
const Channel = "lockstream_inbox"

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

// Message is one message of a member's inbox.
type Message struct {
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
	// Frame is shared by the messages of one notification payload (ParseNews),
	// which differ only by member, id and seq: what a stream writes of them is
	// rendered once (Frame.Tail). Nil on messages read from the inbox.
	Frame *Frame
}

// Frame keeps what the messages of one notification payload share, once
// rendered, for every stream they go to.
type Frame struct {
	once sync.Once
	tail []byte
}

// Tail returns the shared rendering, made by render on the first call (render
// must not depend on the member, id or seq).
func (f *Frame) Tail(render func() []byte) []byte {
	f.once.Do(func() { f.tail = render() })
	return f.tail
}

// Columns are selected by every message query (m = inbox_messages, s =
// sensors LEFT JOINed), in ScanMessage's order.
const Columns = `m.id::text, m.member_id::text, m.seq, m.client_id::text, m.type, coalesce(m.sensor_id, ''),
	coalesce(s.address, ''), m.data, m.previous, m.event_at, m.severity, m.cause, coalesce(m.subject, ''), m.message,
	m.seen_at, m.created_at, coalesce(s.site, '')`

func ScanMessage(row pgx.Row, extra ...any) (Message, error) {
	var (
		m              Message
		data, previous *int16
		message        []byte
	)
	dest := append(extra, &m.ID, &m.MemberID, &m.Seq, &m.ClientID, &m.Type, &m.SensorID, &m.SensorAddress,
		&data, &previous, &m.At, &m.Severity, &m.Cause, &m.Subject, &message, &m.SeenAt, &m.CreatedAt, &m.SensorSite)
	if err := row.Scan(dest...); err != nil {
		return Message{}, err
	}
	m.Data, m.Previous = intPtr(data), intPtr(previous)
	if message != nil {
		m.Message = json.RawMessage(message)
	}
	return m, nil
}

// intPtr widens a nullable smallint column.
func intPtr(v *int16) *int {
	if v == nil {
		return nil
	}
	n := int(*v)
	return &n
}
