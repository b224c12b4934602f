package incident

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/storage"
)

// Round is what one reminder round does.
type Round struct {
	// Now is the round's clock: due times up to it are reminded.
	Now time.Time
	// Limit bounds the incidents one send statement reminds (a mark is sent
	// in as many statements as it needs).
	Limit int
	// PublicURL, when set, puts a one-click ack link (PublicURL/ack/<token>)
	// in every reminder; AckTTL is how long it works.
	PublicURL string
	AckTTL    time.Duration
}

// Mark says what a round's mark did.
type Mark struct {
	// Marked reports that the round moved the cursor and wrote the window
	// (From, To] as a mark (From zero for the first round: -infinity); false
	// when the cursor was already at or past Now.
	Marked   bool
	From, To time.Time
	// Retired is the number of tiers past their stop_at (every mark covering
	// them sent) that the round took off the live index.
	Retired int
	// Statements is the number of statements sent: one, whatever the number
	// of incidents.
	Statements int
}

// Sent says what one send statement did.
type Sent struct {
	// Marks is 1 when a mark was found (and not held by another sender), 0
	// when none was left to this sender; Done reports that it was sent whole
	// and deleted.
	Marks int
	Done  bool
	// Incidents is the number of incidents with due tiers handled (at most
	// the limit); Reminders the number of inbox messages added; Emails and
	// Pushes the deliveries queued for them (reminderChannels).
	Incidents, Reminders, Emails, Pushes int
	// Statements is the number of statements sent (BEGIN and COMMIT
	// included): the same whatever it handled.
	Statements int
}

// RoundResult says what a reminder round did: its mark and the sends that
// followed it.
type RoundResult struct {
	Mark Mark
	// Sends is the number of send statements run; Incidents and Reminders
	// their sums.
	Sends, Incidents, Reminders int
	// Statements is the number of statements of the mark and the sends.
	Statements int
}

// ReminderType is the inbox message type of a reminder.
const ReminderType = domain.IncidentReminder

// RemindRound runs a round (MarkRound at r.Now) and then sends marks
// (SendMarks) until none is left to this process. Another process may be
// sending a mark at the same time: it is left to it.
func (p *PostgresStore) RemindRound(ctx context.Context, r Round) (RoundResult, error) {
	if r.Limit <= 0 {
		return RoundResult{}, fmt.Errorf("reminder round: limit %d must be positive", r.Limit)
	}
	m, err := p.MarkRound(ctx, r.Now)
	if err != nil {
		return RoundResult{}, err
	}
	res := RoundResult{Mark: m, Statements: m.Statements}
	for {
		s, err := p.SendMarks(ctx, r)
		if err != nil {
			return res, err
		}
		res.Statements += s.Statements
		if s.Marks == 0 {
			return res, nil
		}
		res.Sends++
		res.Incidents += s.Incidents
		res.Reminders += s.Reminders
	}
}

// MarkRound runs one reminder round at now in one statement, whatever the
// number of incidents (markSQL): it moves the reminder cursor from where the
// last round left it to now and writes that window as a mark, which
// SendMarks then sends. Several processes may run rounds at once: the
// cursor's row lock orders them, and a window is marked once.
func (p *PostgresStore) MarkRound(ctx context.Context, now time.Time) (Mark, error) {
	m := Mark{Statements: 1}
	var from, to *time.Time
	err := p.pool.QueryRow(ctx, markSQL, now).Scan(&m.Marked, &from, &to, &m.Retired)
	if err != nil {
		return Mark{}, fmt.Errorf("marking a reminder round: %w", storage.MapError(err))
	}
	if from != nil {
		m.From = *from
	}
	if to != nil {
		m.To = *to
	}
	return m, nil
}

// markSQL is a round's statement. $1 now.
//
// It moves the cursor's window on to (to_at, $1] when $1 is past to_at (the
// row lock makes a concurrent round wait, then see the moved cursor) and
// inserts that window as a mark. In the same statement it retires the live
// tiers whose every due time was sent: stop_at at or before the horizon (the
// oldest pending mark's from_at, or the cursor when none is pending; every
// window ending there was sent whole) and written before it.
const markSQL = `
WITH moved AS (
	UPDATE incident_reminder_cursor SET from_at = to_at, to_at = $1 WHERE to_at < $1
	RETURNING from_at, to_at
), marked AS (
	INSERT INTO incident_reminder_marks (from_at, to_at) SELECT from_at, to_at FROM moved
), horizon AS (
	SELECT least((SELECT min(from_at) FROM incident_reminder_marks), (SELECT to_at FROM incident_reminder_cursor)) AS at
), retired AS (
	UPDATE incident_tiers t SET next_at = NULL
	FROM horizon h
	WHERE t.next_at IS NOT NULL AND t.stop_at <= h.at AND t.since < h.at
	RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM moved), (SELECT nullif(from_at, '-infinity') FROM moved), (SELECT to_at FROM moved),
       (SELECT count(*) FROM retired)`

// SendMarks runs one send statement (sendSQL) in a transaction of a fixed
// number of statements (four: BEGIN, the settings, sendSQL, COMMIT): it takes
// the oldest mark no other sender holds (SKIP LOCKED) and reminds, for up to
// r.Limit incidents after the mark's last one, every member of their tiers
// of each due time in the mark's window, then moves the mark on (or deletes
// it when sent whole). The mark moves with the reminders: a crash rolls both
// back, so no member is reminded twice for one due time, nor skipped.
func (p *PostgresStore) SendMarks(ctx context.Context, r Round) (Sent, error) {
	if r.Limit <= 0 {
		return Sent{}, fmt.Errorf("sending reminders: limit %d must be positive", r.Limit)
	}
	res := Sent{Statements: 4}
	var notified, woke int
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		// The statement is planned once and runs once: compiling it (JIT)
		// costs more than it saves, and a full send's sorts and hashes spill
		// to disk under the default work_mem.
		if _, err := tx.Exec(ctx, `SELECT set_config('jit', 'off', true), set_config('work_mem', '64MB', true)`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, sendSQL, r.Now, r.Limit, r.PublicURL, r.Now.Add(r.AckTTL)).
			Scan(&res.Marks, &res.Incidents, &res.Reminders, &notified, &res.Done, &res.Emails, &res.Pushes, &woke)
	})
	if err != nil {
		return Sent{}, fmt.Errorf("sending reminders: %w", storage.MapError(err))
	}
	return res, nil
}

// memberHears is member routing (docs/DESIGN.md "Routing per member"): a
// condition on m (members) and inc (the incident: client_id, sensor_id, site,
// severity) that the member's routing lets the incident through — the SQL
// function lockstream_routes (migration 00172, storage.MemberRoutes), the one
// rule the fan-out's inbox write and the notices use too. The incident's site
// is a site incident's, or its sensor's; a site incident names no sensor, so
// it stands in as "site:<name>", which no member routes by sensor, and its
// site decides. The list of a member's incidents (List) and the reminders use
// this one condition.
const memberHears = `lockstream_routes(m, coalesce(nullif(inc.sensor_id, ''), 'site:' || inc.site),
	coalesce(nullif(inc.site, ''), (SELECT s.site FROM sensors s WHERE s.id = inc.sensor_id)), inc.severity)`

// tierInMark is the condition that a live tier t was written before mark k's
// round and may have a due time in its window; tierDues (a LATERAL subquery
// over t and k) gives the range of its due times' numbers in the window: due
// time n is t.next_at + n × repeat_every, at most stop_at. The window is (lo,
// hi]: lo is the mark's from_at, or -infinity for a tier written since (the
// round before never saw it); hi is the mark's to_at or the tier's stop_at.
// Epochs of intervals are numeric: the division is exact.
const (
	tierInMark = `t.next_at IS NOT NULL AND t.since < k.to_at AND t.next_at <= least(k.to_at, t.stop_at)`
	tierDues   = `(SELECT CASE WHEN t.since >= k.from_at OR k.from_at < t.next_at THEN 0
	                  ELSE floor(extract(epoch FROM k.from_at - t.next_at) / extract(epoch FROM t.repeat_every))::bigint + 1
	                  END AS lo,
	                  floor(extract(epoch FROM least(k.to_at, t.stop_at) - t.next_at)
	                        / extract(epoch FROM t.repeat_every))::bigint AS hi)`
)

// sendSQL is a send statement. $1 now, $2 the limit of incidents, $3 the
// public URL (” for no link), $4 when its ack links expire.
//
// It takes the oldest mark no other sender holds, picks the next $2 incidents
// (by id, after the mark's last one) with a tier due in its window, and for
// each due time of each of their tiers, when the incident is still open,
// picks the tier's members (NULL members: every member of the client) whose
// routing lets the incident through, once per (incident, member, due time);
// for each it makes a random ack token (stored hashed), writes a timeline
// entry and an inbox message incident_reminder (storage's inbox write: seqs,
// escalation episode, NOTIFY for the streams). Then it moves the mark's last
// incident on, or deletes the mark when fewer than $2 were left.
const sendSQL = `
WITH k AS MATERIALIZED (
	SELECT id, from_at, to_at, coalesce(after, '00000000-0000-0000-0000-000000000000') AS after
	FROM incident_reminder_marks ORDER BY id LIMIT 1
	FOR UPDATE SKIP LOCKED
), pick AS MATERIALIZED (
	SELECT DISTINCT t.incident_id
	FROM k JOIN incident_tiers t ON t.incident_id > k.after AND ` + tierInMark + `
	CROSS JOIN LATERAL ` + tierDues + ` b
	WHERE b.lo <= b.hi
	ORDER BY t.incident_id
	LIMIT $2
), due AS MATERIALIZED (
	SELECT t.incident_id, t.tier, t.members, t.next_at + g.n * t.repeat_every AS due_at
	FROM k CROSS JOIN pick p
	JOIN incident_tiers t ON t.incident_id = p.incident_id AND ` + tierInMark + `
	CROSS JOIN LATERAL ` + tierDues + ` b
	CROSS JOIN LATERAL generate_series(b.lo, b.hi) AS g (n)
), inc AS (
	SELECT d.incident_id, d.tier, d.due_at, d.members, i.client_id, i.sensor_id, i.site, i.severity,
	       i.type, i.opened_at, i.subject
	FROM due d JOIN incidents i ON i.id = d.incident_id
	WHERE i.state = 'open'
), listed AS (
	-- A tier's members by primary key; a tier of every member by the client's
	-- index (two branches, so neither scans what the other needs).
	SELECT inc.*, m.id AS member_id
	FROM inc CROSS JOIN LATERAL unnest(inc.members) AS u (id)
	JOIN members m ON m.id = u.id AND m.client_id = inc.client_id
	WHERE ` + memberHears + `
	UNION ALL
	SELECT inc.*, m.id AS member_id
	FROM inc JOIN members m ON m.client_id = inc.client_id
	WHERE inc.members IS NULL AND ` + memberHears + `
), rcpt AS MATERIALIZED (
	SELECT DISTINCT ON (incident_id, member_id, due_at) *,
	       replace(gen_random_uuid()::text, '-', '') AS token
	FROM listed
	ORDER BY incident_id, member_id, due_at, tier
), tokens AS (
	INSERT INTO incident_ack_tokens (hash, incident_id, member_id, expires_at)
	SELECT sha256(convert_to(token, 'UTF8')), incident_id, member_id, $4 FROM rcpt
), timeline AS (
	INSERT INTO incident_timeline (incident_id, at, kind, member_id, channel, detail)
	SELECT incident_id, $1, 'reminder', member_id, 'inbox', 'tier ' || tier || ', due ' || due_at FROM rcpt
), moved AS (
	UPDATE incident_reminder_marks x
	SET after = (SELECT incident_id FROM pick ORDER BY incident_id DESC LIMIT 1)
	FROM k WHERE x.id = k.id AND (SELECT count(*) FROM pick) >= $2
), sent AS (
	DELETE FROM incident_reminder_marks x USING k WHERE x.id = k.id AND (SELECT count(*) FROM pick) < $2
	RETURNING 1
), t AS (
	SELECT r.member_id, r.client_id, NULL::uuid AS notification_id, '` + ReminderType + `'::text AS type,
	       NULL::text AS sensor_id, NULL::int2 AS data, NULL::int2 AS previous, $1::timestamptz AS event_at,
	       r.severity, 'event' AS cause,
	       'Incident not acknowledged: ' || r.type || ' of ' || r.subject AS subject,
	       jsonb_build_object('incident_id', r.incident_id, 'subject', r.subject, 'severity', r.severity,
	                          'type', r.type, 'opened_at', r.opened_at, 'tier', r.tier, 'due_at', r.due_at,
	                          'sensor_id', r.sensor_id, 'site', r.site,
	                          'ack_url', CASE WHEN $3::text <> '' THEN rtrim($3::text, '/') || '/ack/' || r.token END)
	           AS message,
	       row_number() OVER (ORDER BY r.due_at, r.incident_id) AS ord
	FROM rcpt r
	` + inbox.WriteNotified + reminderChannels + `
SELECT (SELECT count(*) FROM k), (SELECT count(*) FROM pick), (SELECT count(*) FROM ins), (SELECT count(*) FROM notified),
       EXISTS (SELECT 1 FROM sent), (SELECT count(*) FROM mail), (SELECT count(*) FROM push), (SELECT n FROM woke)`

// PushPrototype is the Swrve message prototype of a reminder's push.
const PushPrototype = "incident.reminder"

// reminderChannels follows sendSQL's inbox write (ins: the reminders added):
// each reminder also goes by email and push as its member's preferences say
// (docs/DESIGN.md "Reminders by email and push"), with the same one-click ack
// link as its inbox message, rendered when sent:
//   - an email (a member email of kind message naming the reminder's seq,
//     event type incident_reminder) to a member with an address whose email
//     preference is once_per_unread, or digest for a critical incident (a
//     digest never holds a critical); off: none;
//   - a push per device of a member whose push preference is not false: a
//     standalone push (pushes row) of prototype PushPrototype whose message
//     is the reminder's JSON (incident, subject, ack_url…), with a member
//     email row of kind push naming the reminder, so that quiet hours hold a
//     non-critical one and never a critical one (storage's delivery targets).
//
// The retriers are woken on commit.
const reminderChannels = `, mail AS MATERIALIZED (
	SELECT lockstream_uuid_v7() AS id, i.member_id, i.client_id, i.seq
	FROM ins i JOIN members mb ON mb.id = i.member_id
	WHERE coalesce(mb.email, '') <> ''
	  AND (mb.preferences ->> 'email' = 'once_per_unread' OR mb.preferences ->> 'email' = 'digest' AND i.severity = 'critical')
), push AS MATERIALIZED (
	SELECT lockstream_uuid_v7() AS id, i.member_id, i.client_id, i.seq, i.message, t.platform, t.push_key
	FROM ins i JOIN members mb ON mb.id = i.member_id JOIN member_push_targets t ON t.member_id = i.member_id
	WHERE (mb.preferences ->> 'push')::boolean IS NOT FALSE
), queued AS (
	INSERT INTO deliveries (id, client_id, sensor_id, event_type, channel, target, state, next_attempt_at, event_at)
	SELECT id, client_id, NULL, '` + ReminderType + `', 'email', 'member:' || member_id, 'PENDING', now(), now() FROM mail
	UNION ALL
	SELECT id, client_id, NULL, '` + ReminderType + `', 'swrve', platform || ':' || push_key, 'PENDING', now(), now() FROM push
), listed_in AS (
	INSERT INTO member_emails (delivery_id, event_at, member_id, kind, key, from_seq, to_seq)
	SELECT id, now(), member_id, 'message', NULL, seq - 1, seq FROM mail
	UNION ALL
	SELECT id, now(), member_id, 'push', NULL, seq - 1, seq FROM push
), pushed AS (
	INSERT INTO pushes (delivery_id, platform, message_prototype_key, push_key, message, window_at, received_at)
	SELECT id, platform, '` + PushPrototype + `', push_key, message::text, now(), now() FROM push
), woke AS (
	SELECT count(pg_notify('` + storage.OutboxChannel + `', w.lane)) AS n
	FROM (SELECT 'email' AS lane WHERE EXISTS (SELECT 1 FROM mail)
	      UNION ALL SELECT 'swrve' WHERE EXISTS (SELECT 1 FROM push)) w
)`
