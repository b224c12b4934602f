package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Write completes an inbox write. It follows a CTE t (member_id, client_id,
// notification_id, type, sensor_id, data, previous, event_at, severity, cause,
// subject, message, ord) of the messages to add, ord ordering each member's
// messages, and in the same statement:
//   - holds the members' clients' shared-message counters (clients.inbox_cseq,
//     FOR SHARE, to commit), so no shared message is written for them meanwhile
//     and the counter read is the newest;
//   - locks the member_inbox rows of the members concerned in member-id order
//     (so concurrent writers never deadlock) and moves each member's seq on by
//     its count, after its shared messages not yet materialized (whose seqs
//     were fixed when they were written: MaterializeMembers): seqs are taken
//     under the lock and committed with the messages, so they have no gap and
//     no duplicate whatever the number of writers;
//   - inserts the messages with seqs base+1, base+2… in ord order;
//   - opens or joins each member's escalation episode of the messages' sensor
//     (or free-form type): EpisodeWrite.
//
// A member deleted meanwhile has no member_inbox row and gets nothing. What
// follows it announces the messages on Channel: WriteRows (the writer
// then calls Notify) or writeCount.
const Write = `
), c AS (
	SELECT member_id, count(*) AS n FROM t GROUP BY member_id
), held AS MATERIALIZED (
	SELECT cl.id, cl.inbox_cseq FROM clients cl
	WHERE cl.id IN (SELECT mb.client_id FROM members mb WHERE mb.id IN (SELECT member_id FROM c))
	ORDER BY cl.id
	FOR SHARE
), locked AS MATERIALIZED (
	SELECT mi.member_id, h.inbox_cseq FROM member_inbox mi
	JOIN members mb ON mb.id = mi.member_id JOIN held h ON h.id = mb.client_id
	WHERE mi.member_id IN (SELECT member_id FROM c)
	ORDER BY mi.member_id
	FOR UPDATE OF mi
), bumped AS (
	UPDATE member_inbox mi SET last_seq = ` + VirtualLastSeq + ` + c.n,
	       -- Nothing shared pending: the position moves on; else the messages
	       -- are gaps between the shared ones.
	       mat_seq = CASE WHEN l.inbox_cseq = mi.mat_cseq THEN ` + VirtualLastSeq + ` + c.n ELSE mi.mat_seq END,
	       gaps = CASE WHEN l.inbox_cseq = mi.mat_cseq THEN mi.gaps
	                   ELSE mi.gaps || array_fill(l.inbox_cseq, ARRAY[c.n::int]) END
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
)` + EpisodeWrite + `
`

// VirtualLastSeq is a member's newest seq, its shared messages not yet
// materialized included, over its member_inbox row mi and its client's counter
// l.inbox_cseq.
const VirtualLastSeq = `greatest(mi.last_seq, mi.mat_seq + (l.inbox_cseq - mi.mat_cseq) + cardinality(mi.gaps))`

// WriteRows ends an inbox write by returning the messages added, with their
// sensor's address, for Notify (inboxPayloads reads them in this order).
const WriteRows = Write + `SELECT ` + RowColumns + `
	FROM ins m LEFT JOIN sensors s ON s.id = m.sensor_id
	ORDER BY m.notification_id, m.member_id`

// rows).
const RowColumns = `coalesce(m.notification_id::text, ''), ` + Columns

// writeCount ends an inbox write by NOTIFYing pointers (<member id>:<newest
// seq>, 120 a payload) in SQL and answering how many messages it added; the
// count of notified forces the NOTIFYs to run.
const writeCount = WriteNotified + `
SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM notified)`

// WriteNotified is an inbox write (Write: seqs, messages, episodes)
// for a statement of another box that puts messages in inboxes (the incident
// reminders): it follows the statement's CTE t (Write's columns) and ends
// with the CTE notified, which NOTIFYs pointers (<member id>:<newest seq>, 120
// a payload) on Channel. The statement's final SELECT must read notified
// (count(*)) for the NOTIFYs to run, and may count ins, the messages added.
const WriteNotified = Write + `, notified AS (
	SELECT pg_notify('` + Channel + `', string_agg(member_id::text || ':' || last_seq, ','))
	FROM (SELECT member_id, last_seq, (row_number() OVER () - 1) / 120 AS chunk FROM bumped) x
	GROUP BY chunk
)`

// EventSeverity is the severity of a sensor event's message, as
// event.SeverityOf grades it (a test checks they agree): a connection lost
// while unlocked, or an unlock longer than open_alert_after, is critical;
// another loss, a site outage, a failing or disabled endpoint a warning;
// anything else info.
const EventSeverity = `CASE WHEN %[1]s.type = 'sensor_open_too_long' THEN 'critical'
	WHEN %[1]s.type = 'connection_lost' AND %[1]s.data = 0 THEN 'critical'
	WHEN %[1]s.type IN ('connection_lost', 'site_outage', 'endpoint_failing', 'endpoint_disabled') THEN 'warning'
	ELSE 'info' END`

// belongs to ("" for a free-form one).
type Added struct {
	Message
	notification string
	// sharedID is the shared message whose member's copy this is (ID is then
	// derived from it: MemberMessageID); empty for a message of its own.
	sharedID string
}

func CollectAdded(rows pgx.Rows) ([]Added, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Added, error) {
		var a Added
		m, err := ScanMessage(row, &a.notification)
		a.Message = m
		return a, err
	})
}

// Backfill copies into the new member's inbox the client's notifications of
// the last window, the newest max of them (none when either is not
// positive), oldest first, unseen, with cause
// new_member: of the client's last max seqs, those written within the window
// (notifications from before seqs, migration 00131, have none and are not
// copied). It runs in the member's creating transaction, so a notification
// is either copied here or written by the fan-out, never both: the fan-out sees
// the member only once this transaction committed, and this one sees only
// notifications committed before it.
func Backfill(ctx context.Context, tx pgx.Tx, memberID, clientID string, window time.Duration, max int) (int, error) {
	if max <= 0 || window <= 0 {
		return 0, nil
	}
	var added, notified int
	err := tx.QueryRow(ctx, `
		WITH src AS (
			-- The client's last max seqs, through the feed's index (migration
			-- 00245): seqs follow the order notifications are written in.
			SELECT n.id, n.client_id, n.type, n.sensor_id, n.data, n.previous, n.event_at, n.client_seq
			FROM notifications n
			WHERE n.client_id = $2
			  AND n.client_seq > (SELECT coalesce(max(q.last_seq), 0) FROM client_event_seq q WHERE q.client_id = $2) - $4
			  AND n.created_at > now() - $3::interval
		), t AS (
			SELECT $1::uuid AS member_id, src.client_id, src.id AS notification_id, src.type, src.sensor_id,
			       src.data, src.previous, src.event_at, `+fmt.Sprintf(EventSeverity, "src")+` AS severity,
			       'new_member' AS cause, NULL::text AS subject, NULL::jsonb AS message,
			       row_number() OVER (ORDER BY src.client_seq) AS ord
			FROM src
		`+writeCount,
		memberID, clientID, window, max).Scan(&added, &notified)
	if err != nil {
		return 0, fmt.Errorf("backfilling the new member's inbox: %w", err)
	}
	return added, nil
}

// FreeFormNotification is a notification that is not about a sensor, from
// another service (POST /v1/notifications, the AMQP bridge): it reaches the
