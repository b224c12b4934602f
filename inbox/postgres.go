package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/internal/pgutil"
)

// PostgresStore holds the members' inboxes: their messages, reads, marks and
// acknowledgements, the free-form notifications' writes, the NOTIFY feed of
// new messages (Channel) and the month partitions of inbox_messages. The
// writes that other boxes make inside their own transactions (the fan-out's,
// the notices', a new member's backfill, the incident reminders') compose this
// package's statements: Write, WriteRows, WriteNotified, Notify, Backfill.
type PostgresStore struct {
	pool *pgxpool.Pool
}

// NewPostgresStore returns the inbox's store over p's pool (p is
// storage.Postgres).
func NewPostgresStore(p pgutil.Handle) *PostgresStore {
	return &PostgresStore{pool: p.Pool()}
}

// Sort is a field messages can be listed by.
type Sort string

// The sort fields of GET /v1/messages.
const (
	SortTimestamp Sort = "timestamp"
	SortType      Sort = "type"
	SortSensor    Sort = "sensor"
	// SortID orders by message id, a UUIDv7: by arrival (the v1 API's uuid).
	SortID Sort = "id"
	// SortSubject orders by the stored subject: a free-form notification's;
	// sensor events have none and come last ascending, first descending.
	SortSubject Sort = "subject"
)

// inboxOrder maps each sort field to its ORDER BY column; seq breaks ties.
var inboxOrder = map[Sort]string{
	SortTimestamp: "m.event_at",
	SortType:      "m.type",
	SortSensor:    "m.sensor_id",
	SortID:        "m.id",
	SortSubject:   "m.subject",
}

// Query selects and orders a member's messages. Deleted messages are never
// listed.
type Query struct {
	MemberID string
	// IncludeSeen lists seen messages too; by default only unseen ones.
	IncludeSeen bool
	// SeenOnly lists seen messages only (IncludeSeen is then ignored).
	SeenOnly bool
	// Type keeps only messages of that type; empty keeps all.
	Type       string
	Sort       Sort
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
func (p *PostgresStore) ListInbox(ctx context.Context, q Query) (int, []Message, error) {
	order, ok := inboxOrder[q.Sort]
	if !ok {
		return 0, nil, fmt.Errorf("listing messages: unknown sort field %q", q.Sort)
	}
	if uuid.Validate(q.MemberID) != nil {
		return 0, nil, fmt.Errorf("listing messages of %s: %w", q.MemberID, domain.ErrNotFound)
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
	QueueMaterialize(batch, q.MemberID)
	var total int
	batch.Queue(`SELECT count(*) FROM inbox_messages m WHERE `+where, q.MemberID, q.Type).
		QueryRow(func(row pgx.Row) error { return row.Scan(&total) })
	var messages []Message
	if !q.CountOnly {
		dir := "ASC"
		if q.Descending {
			dir = "DESC"
		}
		batch.Queue(`SELECT `+Columns+` FROM inbox_messages m LEFT JOIN sensors s ON s.id = m.sensor_id
			WHERE `+where+` ORDER BY `+order+` `+dir+`, m.seq `+dir+` LIMIT $3 OFFSET $4`,
			q.MemberID, q.Type, limit, q.Offset).
			Query(func(rows pgx.Rows) error {
				var err error
				messages, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Message, error) {
					return ScanMessage(row)
				})
				return err
			})
	}
	if err := p.pool.SendBatch(ctx, batch).Close(); err != nil {
		return 0, nil, fmt.Errorf("listing messages of member %s: %w", q.MemberID, err)
	}
	return total, messages, nil
}

// GetInboxMessage returns the member's message id, or domain.ErrNotFound when the member
// has no such message (another member's included) or deleted it.
func (p *PostgresStore) GetInboxMessage(ctx context.Context, memberID, id string) (Message, error) {
	if uuid.Validate(memberID) != nil || uuid.Validate(id) != nil {
		return Message{}, fmt.Errorf("getting message %s: %w", id, domain.ErrNotFound)
	}
	batch := &pgx.Batch{}
	QueueMaterialize(batch, memberID)
	var m Message
	batch.Queue(`SELECT `+Columns+`
		FROM inbox_messages m LEFT JOIN sensors s ON s.id = m.sensor_id
		WHERE m.id = $2 AND m.member_id = $1 AND m.deleted_at IS NULL`, memberID, id).QueryRow(func(row pgx.Row) error {
		var err error
		m, err = ScanMessage(row)
		return err
	})
	if err := p.pool.SendBatch(ctx, batch).Close(); err != nil {
		return Message{}, fmt.Errorf("getting message %s: %w", id, pgutil.MapError(err))
	}
	return m, nil
}

// Action is what MarkInbox does to messages.
type Action string

// The actions on messages.
const (
	ActionSeen   Action = "seen"
	ActionUnseen Action = "unseen"
	ActionDelete Action = "delete"
)

// inboxActions maps each action to its SET clause.
var inboxActions = map[Action]string{
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
func (p *PostgresStore) MarkInbox(ctx context.Context, memberID string, action Action, ids []string, all bool) (int, error) {
	return p.markInbox(ctx, memberID, action, ids, all, "")
}

// MarkAllInbox applies action to every message of the member, or to those of
// type typ when it is not empty, in one statement, and returns how many messages
// it found. Deleted messages are skipped.
func (p *PostgresStore) MarkAllInbox(ctx context.Context, memberID string, action Action, typ string) (int, error) {
	return p.markInbox(ctx, memberID, action, nil, true, typ)
}

// markInbox is MarkInbox with a type filter ("" for every type).
func (p *PostgresStore) markInbox(ctx context.Context, memberID string, action Action, ids []string, all bool,
	typ string) (int, error) {
	set, ok := inboxActions[action]
	if !ok {
		return 0, fmt.Errorf("marking messages: unknown action %q", action)
	}
	if uuid.Validate(memberID) != nil {
		return 0, fmt.Errorf("marking messages of %s: %w", memberID, domain.ErrNotFound)
	}
	valid := pgutil.ValidUUIDs(ids)
	if !all && len(valid) == 0 {
		return 0, nil
	}
	batch := &pgx.Batch{}
	QueueMaterialize(batch, memberID)
	var marked int
	batch.Queue(`UPDATE inbox_messages m SET `+set+`
		WHERE m.member_id = $1 AND m.deleted_at IS NULL AND ($2 OR m.id = ANY ($3::uuid[]))
		  AND ($4 = '' OR m.type = $4)`,
		memberID, all, valid, typ).Exec(func(tag pgconn.CommandTag) error {
		marked = int(tag.RowsAffected())
		return nil
	})
	if err := p.pool.SendBatch(ctx, batch).Close(); err != nil {
		return 0, fmt.Errorf("marking messages %s for member %s: %w", action, memberID, err)
	}
	return marked, nil
}

// State is where a member's inbox stands, for its stream.
type State struct {
	Epoch    string
	AckedSeq int64
	LastSeq  int64
	// FirstSeq is the seq of the oldest message still stored (deleted ones
	// included); 0 when none is. Messages before it are gone (retention).
	FirstSeq int64
}

// GetInboxState returns the member's inbox state, or domain.ErrNotFound.
func (p *PostgresStore) GetInboxState(ctx context.Context, memberID string) (State, error) {
	if uuid.Validate(memberID) != nil {
		return State{}, fmt.Errorf("reading inbox of %s: %w", memberID, domain.ErrNotFound)
	}
	var s State
	batch := &pgx.Batch{}
	QueueMaterialize(batch, memberID)
	batch.Queue(`
		SELECT epoch, acked_seq, last_seq,
		       coalesce((SELECT min(seq) FROM inbox_messages WHERE member_id = $1), 0)
		FROM member_inbox WHERE member_id = $1`, memberID).QueryRow(func(row pgx.Row) error {
		return row.Scan(&s.Epoch, &s.AckedSeq, &s.LastSeq, &s.FirstSeq)
	})
	if err := p.pool.SendBatch(ctx, batch).Close(); err != nil {
		return State{}, fmt.Errorf("reading inbox of %s: %w", memberID, pgutil.MapError(err))
	}
	return s, nil
}

// AckInbox records that the member's stream received everything up to seq; an
// older seq than the one acknowledged changes nothing. It returns ErrSeqAhead
// (changing nothing) when seq is beyond the newest message, and domain.ErrNotFound for
// an unknown member.
func (p *PostgresStore) AckInbox(ctx context.Context, memberID string, seq int64) error {
	if uuid.Validate(memberID) != nil {
		return fmt.Errorf("acknowledging for %s: %w", memberID, domain.ErrNotFound)
	}
	var last int64
	batch := &pgx.Batch{}
	QueueMaterialize(batch, memberID)
	batch.Queue(`
		UPDATE member_inbox
		SET acked_seq = CASE WHEN $2 <= last_seq THEN greatest(acked_seq, $2) ELSE acked_seq END
		WHERE member_id = $1
		RETURNING last_seq`, memberID, seq).QueryRow(func(row pgx.Row) error { return row.Scan(&last) })
	err := p.pool.SendBatch(ctx, batch).Close()
	switch {
	case err != nil:
		return fmt.Errorf("acknowledging seq %d for %s: %w", seq, memberID, pgutil.MapError(err))
	case seq > last:
		return fmt.Errorf("acknowledging seq %d for %s (newest %d): %w", seq, memberID, last, ErrSeqAhead)
	}
	return nil
}

// Cursor asks for the member's messages after seq After, at most Limit.
type Cursor struct {
	MemberID string
	After    int64
	Limit    int
}

// InboxAfter returns, for each cursor, the member's messages after it in seq
// order (deleted ones skipped), in one query whatever the number of cursors.
func (p *PostgresStore) InboxAfter(ctx context.Context, cursors []Cursor) ([][]Message, error) {
	out := make([][]Message, len(cursors))
	if len(cursors) == 0 {
		return out, nil
	}
	members := make([]string, len(cursors))
	after := make([]int64, len(cursors))
	limits := make([]int, len(cursors))
	for i, c := range cursors {
		members[i], after[i], limits[i] = c.MemberID, c.After, c.Limit
	}
	batch := &pgx.Batch{}
	QueueMaterialize(batch, members...)
	batch.Queue(`
		SELECT w.i, `+Columns+`
		FROM unnest($1::uuid[], $2::bigint[], $3::int[]) WITH ORDINALITY AS w (member_id, after, lim, i)
		CROSS JOIN LATERAL (
			SELECT * FROM inbox_messages x
			WHERE x.member_id = w.member_id AND x.seq > w.after AND x.deleted_at IS NULL
			ORDER BY x.seq LIMIT w.lim
		) m
		LEFT JOIN sensors s ON s.id = m.sensor_id
		ORDER BY w.i, m.seq`, members, after, limits).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var i int
			m, err := ScanMessage(rows, &i)
			if err != nil {
				return err
			}
			out[i-1] = append(out[i-1], m)
		}
		return rows.Err()
	})
	if err := p.pool.SendBatch(ctx, batch).Close(); err != nil {
		return nil, fmt.Errorf("reading messages after cursors: %w", err)
	}
	return out, nil
}

// CreateInboxPartitions makes sure inbox_messages has its month partitions from
// the month of from to months later, and returns their names.
func (p *PostgresStore) CreateInboxPartitions(ctx context.Context, from time.Time, months int) ([]string, error) {
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
