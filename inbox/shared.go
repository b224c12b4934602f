package inbox

// Shared messages (docs/DESIGN.md "Inbox", "Shared messages"): a message that
// every member of a client gets alike is written once, in inbox_shared,
// numbered by the client's counter (clients.inbox_cseq), and announced with
// each member's seq at once; each member's own row is written from it after
// the commit (materialized), by the writer right away and by any reader of the
// member's inbox that comes first.

import (
	"context"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5"
)

// WriteShared completes a shared write. It follows a CTE t (client_id,
// notification_id, type, sensor_id, data, previous, event_at, severity, cause,
// subject, message, ord) of messages that reach every member of their client
// alike and, in the same statement, locks those clients (FOR NO KEY UPDATE, in
// id order, to commit: inbox writes for their members wait, see Write), moves
// each client's counter on by its count and inserts the messages with cseqs
// base+1… in ord order and one id each, from which each member's copy takes
// its own (lockstream_member_message_id). It
// returns the notification of each. No member_inbox row
// is touched: each member's seq of cseq c is already fixed (see
// VirtualLastSeq), and the copies are written by MaterializeShared.
const WriteShared = `
), k AS (
	SELECT client_id, count(*) AS n FROM t GROUP BY client_id
), held AS MATERIALIZED (
	SELECT cl.id FROM clients cl WHERE cl.id IN (SELECT client_id FROM k) ORDER BY cl.id FOR NO KEY UPDATE
), bumped AS (
	UPDATE clients cl SET inbox_cseq = cl.inbox_cseq + k.n
	FROM k JOIN held h ON h.id = k.client_id
	WHERE cl.id = k.client_id
	RETURNING cl.id, cl.inbox_cseq - k.n AS base
)
INSERT INTO inbox_shared (client_id, cseq, id, notification_id, type, sensor_id, data, previous, event_at,
                          severity, cause, subject, message)
SELECT t.client_id, b.base + row_number() OVER (PARTITION BY t.client_id ORDER BY t.ord), lockstream_uuid_v7(),
       t.notification_id, t.type, t.sensor_id, t.data, t.previous, t.event_at, t.severity, t.cause, t.subject, t.message
FROM t JOIN bumped b ON b.id = t.client_id
RETURNING notification_id`

// QueueSharedAudience queues, after WriteShared's statement in the same
// transaction (so its snapshot sees every inbox write that committed before the
// clients were locked, and none can commit since), the read of each member's
// copy of the shared messages of the notifications, with the seq it has; the
// copies are stored in added (for Notify, as WriteRows returns direct
// messages). It reads per shared message one row, its members and their seqs
// as arrays; the copies' ids are derived here (MemberMessageID), as
// lockstream_member_message_id derives them in SQL.
func QueueSharedAudience(b *pgx.Batch, notifications []string, added *[]Added) {
	b.Queue(`
		SELECT coalesce(e.notification_id::text, ''), e.id::text, e.client_id::text, e.type, coalesce(e.sensor_id, ''),
		       coalesce(s.address, ''), e.data, e.previous, e.event_at, e.severity, e.cause, coalesce(e.subject, ''),
		       e.message, e.created_at, coalesce(s.site, ''), a.members, a.seqs
		FROM inbox_shared e
		LEFT JOIN sensors s ON s.id = e.sensor_id
		CROSS JOIN LATERAL (
			-- One sort for both arrays: aggregates over an ordered subquery keep
			-- its order.
			SELECT array_agg(x.member_id) AS members, array_agg(x.seq) AS seqs
			FROM (
				SELECT mi.member_id::text AS member_id,
				       mi.mat_seq + (e.cseq - mi.mat_cseq) + CASE WHEN cardinality(mi.gaps) = 0 THEN 0
				           ELSE (SELECT count(*) FROM unnest(mi.gaps) g WHERE g < e.cseq) END AS seq
				FROM members mb JOIN member_inbox mi ON mi.member_id = mb.id AND mi.mat_cseq < e.cseq
				WHERE mb.client_id = e.client_id
				ORDER BY mi.member_id
			) x
		) a
		WHERE e.notification_id = ANY ($1::uuid[]) AND a.members IS NOT NULL
		ORDER BY e.client_id, e.cseq`, notifications).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				m              Message
				notification   string
				data, previous *int16
				message        []byte
				members        []string
				seqs           []int64
			)
			if err := rows.Scan(&notification, &m.ID, &m.ClientID, &m.Type, &m.SensorID, &m.SensorAddress, &data,
				&previous, &m.At, &m.Severity, &m.Cause, &m.Subject, &message, &m.CreatedAt, &m.SensorSite,
				&members, &seqs); err != nil {
				return fmt.Errorf("reading the audience of shared inbox messages: %w", err)
			}
			m.Data, m.Previous = intPtr(data), intPtr(previous)
			if message != nil {
				m.Message = json.RawMessage(message)
			}
			// The copies' ids are derived by whoever reads the NOTIFY payload
			// (sharedID): none is made here.
			shared := m.ID
			*added = slices.Grow(*added, len(members))
			for i, member := range members {
				m.MemberID, m.Seq = member, seqs[i]
				*added = append(*added, Added{Message: m, notification: notification, sharedID: shared})
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reading the audience of shared inbox messages: %w", err)
		}
		return nil
	})
}

// MemberMessageID is the id of member's copy of the shared message shared (both
// UUIDs in their canonical lower-case text), as lockstream_member_message_id
// makes it: the shared id's first 8 bytes (its time: still a UUIDv7) and
// bytes 8–15 of md5(shared || member) with the variant bits set.
func MemberMessageID(shared, member string) string {
	s, err := uuid.Parse(shared)
	if err != nil {
		return ""
	}
	return memberMessageID(s, shared, member)
}

// memberMessageID is MemberMessageID with the shared id parsed already (s)
// and in its canonical text (shared).
func memberMessageID(s uuid.UUID, shared, member string) string {
	var buf [72]byte
	sum := md5.Sum(append(append(buf[:0], shared...), member...))
	copy(s[8:], sum[8:])
	s[8] = s[8]&0x3f | 0x80
	return s.String()
}

// materialize writes into the inboxes of the members of CTE mm (member_id)
// their shared messages not yet materialized, with the seqs they were
// announced with, and opens or joins their escalation episodes; it answers
// how many messages it wrote. Members with nothing pending are not locked.
// Seqs are the ones fixed when each message was written, whatever the order in
// which writers and readers materialize: each works from the member's locked
// row (the newest) and writes only what follows its mat_cseq.
const materialize = `
), cl AS MATERIALIZED (
	-- The clients first, as every inbox writer and a client's deletion lock
	-- them (so none waits for another in a cycle), and only those with shared
	-- messages pending: a read of an inbox with nothing pending locks nothing.
	SELECT c.id, (SELECT max(e.cseq) FROM inbox_shared e WHERE e.client_id = c.id) AS top_cseq FROM clients c
	WHERE c.id IN (SELECT mb.client_id FROM members mb WHERE mb.id IN (SELECT member_id FROM mm))
	  AND EXISTS (SELECT 1 FROM inbox_shared e WHERE e.client_id = c.id)
	ORDER BY c.id
	FOR KEY SHARE
), locked AS MATERIALIZED (
	-- Pending is judged against the client's newest shared message, a value
	-- fixed by this statement's snapshot, and not by an EXISTS over
	-- inbox_shared: when the lock waits for another materializer, Postgres
	-- rechecks the member's new row against the one shared row the join had
	-- matched, which that materializer may have passed while newer ones wait.
	SELECT mi.member_id, mb.client_id, mi.mat_cseq, mi.mat_seq, mi.gaps FROM member_inbox mi
	JOIN members mb ON mb.id = mi.member_id JOIN cl ON cl.id = mb.client_id
	WHERE mi.member_id IN (SELECT member_id FROM mm) AND mi.mat_cseq < cl.top_cseq
	ORDER BY mi.member_id
	FOR UPDATE OF mi FOR KEY SHARE OF mb
), t AS (
	SELECT l.member_id, e.*, l.mat_seq + (e.cseq - l.mat_cseq) + (SELECT count(*) FROM unnest(l.gaps) g WHERE g < e.cseq) AS seq
	FROM locked l JOIN inbox_shared e ON e.client_id = l.client_id AND e.cseq > l.mat_cseq
), ins AS (
	INSERT INTO inbox_messages (member_id, seq, id, created_at, client_id, notification_id, type, sensor_id, data,
	                            previous, event_at, severity, cause, subject, message)
	SELECT member_id, seq, lockstream_member_message_id(id, member_id), created_at, client_id, notification_id, type,
	       sensor_id, data, previous, event_at, severity, cause, subject, message
	FROM t
	RETURNING *
), top AS (
	SELECT member_id, max(cseq) AS cseq, max(seq) AS seq FROM t GROUP BY member_id
), moved AS (
	-- The member's own messages written right after the newest shared one
	-- (gaps at its cseq) now just follow the position.
	UPDATE member_inbox mi SET mat_cseq = x.cseq,
	       mat_seq = x.seq + (SELECT count(*) FROM unnest(mi.gaps) g WHERE g = x.cseq),
	       gaps = ARRAY(SELECT g FROM unnest(mi.gaps) g WHERE g > x.cseq ORDER BY g),
	       last_seq = greatest(mi.last_seq, x.seq)
	FROM top x WHERE mi.member_id = x.member_id
)` + EpisodeWrite + `
SELECT count(*) FROM ins`

// materializeMembers is materialize for the members $1.
const materializeMembers = `WITH mm AS (SELECT unnest($1::uuid[]) AS member_id` + materialize

// QueueMaterialize queues, before a read of the members' inboxes in the same
// batch, the materializing of their shared messages not yet written, so the
// read sees every message their streams may have shown.
func QueueMaterialize(b *pgx.Batch, members ...string) {
	b.Queue(materializeMembers, members)
}

// QueueSharedPending queues the check whether any shared message still waits
// for its members' copies (this transaction's included), into pending: a
// writer that crashed between a shared write's commit and MaterializeShared
// left them to the next.
func QueueSharedPending(b *pgx.Batch, pending *bool) {
	b.Queue(`SELECT EXISTS (SELECT 1 FROM inbox_shared)`).QueryRow(func(row pgx.Row) error {
		return row.Scan(pending)
	})
}

// MaterializeShared writes every member's copy of the shared messages not yet
// materialized, in one transaction (one statement for the copies and one that
// deletes the shared rows every member now has), and returns how many copies
// it wrote. The fan-out calls it right after the commit that wrote them; a
// later call (the fan-out's next batch, or a replayed one) finishes what a
// crash left.
func MaterializeShared(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `WITH mm AS (
			SELECT mb.id AS member_id FROM members mb WHERE mb.client_id IN (SELECT DISTINCT client_id FROM inbox_shared)`+
			materialize).Scan(&n); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			DELETE FROM inbox_shared e
			WHERE e.cseq <= coalesce((SELECT min(mi.mat_cseq) FROM members mb JOIN member_inbox mi ON mi.member_id = mb.id
			                          WHERE mb.client_id = e.client_id), e.cseq)`)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("materializing shared inbox messages: %w", err)
	}
	return n, nil
}
