package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The escalation-episode key of a message (inbox_messages aliased x, or i): its
// sensor, or '#' and its type for a free-form notification ('#' is in no
// sensor id). It must read as in the index inbox_messages_episode_idx.
const (
	episodeKeyX = `coalesce(x.sensor_id, '#' || x.type)`
	episodeKeyI = `coalesce(i.sensor_id, '#' || i.type)`
)

// episodeUnseen is the condition on inbox_messages x that a message counts for
// an episode: unseen, not deleted, not marked unseen by the member itself.
const episodeUnseen = `x.seen_at IS NULL AND x.deleted_at IS NULL AND NOT x.self_unseen`

// episodeWrite follows inboxWrite's ins (the messages inserted) and, in the same
// statement, opens or joins the escalation episode of each member and key of
// the new messages (docs/DESIGN.md "Escalation of unseen messages"): a key
// whose last episode still has an unseen message joins it (a critical message
// sets critical_at once); otherwise a new episode starts at the first new
// message, unhandled. Joining an open episode writes nothing, unless a
// critical message is the first of it. The episodes' members are locked by
// inboxWrite, so no other inbox write races this one — but for a writer that
// committed while this statement waited for that lock, whose messages and
// episode its snapshot does not see: should both write the same key (two
// free-form notifications of one type at once; one sensor's events are
// written by one fan-out worker in order), the later one restarts the
// episode at its own message. An escalation round marks an episode handled
// only while its first_seq is the one it judged.
const episodeWrite = `, g AS (
	SELECT i.member_id, ` + episodeKeyI + ` AS key, (min(i.client_id::text))::uuid AS client_id,
	       min(i.sensor_id) AS sensor_id, min(i.type) AS type, min(i.seq) AS first_seq,
	       bool_or(i.severity = 'critical') AS critical
	FROM ins i GROUP BY 1, 2
), episodes AS (
	INSERT INTO escalation_episodes AS e (member_id, key, client_id, sensor_id, type, first_seq, opened_at, critical_at)
	SELECT g.member_id, g.key, g.client_id, g.sensor_id, g.type,
	       CASE WHEN o.open THEN o.first_seq ELSE g.first_seq END,
	       CASE WHEN o.open THEN o.opened_at ELSE now() END,
	       CASE WHEN o.open AND o.critical_at IS NOT NULL THEN o.critical_at WHEN g.critical THEN now() END
	FROM g LEFT JOIN LATERAL (
		SELECT p.first_seq, p.opened_at, p.critical_at, EXISTS (
			SELECT 1 FROM inbox_messages x
			WHERE x.member_id = p.member_id AND ` + episodeKeyX + ` = p.key AND x.seq >= p.first_seq
			  AND ` + episodeUnseen + `) AS open
		FROM escalation_episodes p WHERE p.member_id = g.member_id AND p.key = g.key
	) o ON true
	-- Joining an open episode writes nothing, not even a row lock (ON CONFLICT
	-- DO UPDATE … WHERE would lock the row): only new episodes and first
	-- critical messages go on.
	WHERE o.open IS NOT TRUE OR (g.critical AND o.critical_at IS NULL)
	ON CONFLICT (member_id, key) DO UPDATE
	SET first_seq = excluded.first_seq, opened_at = excluded.opened_at, client_id = excluded.client_id,
	    sensor_id = excluded.sensor_id, type = excluded.type,
	    critical_at = CASE WHEN e.first_seq = excluded.first_seq THEN coalesce(e.critical_at, excluded.critical_at)
	                       ELSE excluded.critical_at END,
	    email_at = CASE WHEN e.first_seq = excluded.first_seq THEN e.email_at END,
	    push_at = CASE WHEN e.first_seq = excluded.first_seq THEN e.push_at END
	WHERE e.first_seq <> excluded.first_seq OR (e.critical_at IS NULL AND excluded.critical_at IS NOT NULL)
)`

// UnseenPushPrototype is the Swrve message prototype of escalation pushes.
const UnseenPushPrototype = "sensor.unseen"

// escalationPushRequests selects (delivery id, then pushColumns' order) the
// requests of the escalation pushes about a sensor among the deliveries $1,
// which have no pushes row: the device is the delivery's target, $2 the
// prototype. NOT EXISTS skips the ones queued before the round stopped
// writing those rows.
const escalationPushRequests = `
	SELECT d.id::text, split_part(d.target, ':', 1), $2::text, substr(d.target, strpos(d.target, ':') + 1),
	       'You have unseen notifications about sensor ' || d.sensor_id, '', d.event_at, d.event_at
	FROM deliveries d
	WHERE d.id = ANY ($1::uuid[]) AND d.channel = 'swrve' AND d.notification_id IS NULL
	  AND d.event_type = 'unseen' AND d.sensor_id IS NOT NULL
	  AND NOT EXISTS (SELECT 1 FROM pushes p WHERE p.delivery_id = d.id)`

// memberEmailRows is what the member emails among the deliveries $1 list, as
// member_emails rows: theirs, and for an episode's email about a sensor (which
// has none) the member of its target and the sensor as key, from seq 0 — the
// member's unseen messages about the sensor are the episode's, since an
// episode opens only when every earlier one is seen or deleted (messages
// marked unseen by the member are left out either way).
const memberEmailRows = `(
		SELECT delivery_id, kind, member_id, key, from_seq, to_seq FROM member_emails
		WHERE delivery_id = ANY ($1::uuid[])
		UNION ALL
		SELECT d.id, 'unseen', substr(d.target, length('member:') + 1)::uuid, d.sensor_id, 0, NULL
		FROM deliveries d
		WHERE d.id = ANY ($1::uuid[]) AND d.channel = 'email' AND d.notification_id IS NULL
		  AND d.event_type = 'unseen' AND d.sensor_id IS NOT NULL AND d.target LIKE 'member:%'
		  AND NOT EXISTS (SELECT 1 FROM member_emails e WHERE e.delivery_id = d.id)
	)`

// EscalationRound is what one escalation round does.
type EscalationRound struct {
	// Now is the round's clock.
	Now time.Time
	// EmailAfter and PushAfter are how long an episode stays open before its
	// email and its push; a quarter of each from its first critical message.
	EmailAfter, PushAfter time.Duration
	// Limit bounds the episodes and the digest members one round handles.
	Limit int
}

// EscalationResult says what a round did.
type EscalationResult struct {
	// Ran is false when another process held the round lock: nothing was done.
	Ran bool
	// Episodes is the number of due episodes handled (with or without sending);
	// Full reports that Episodes or DigestMembers reached the limit, so more may
	// be due.
	Episodes int
	Full     bool
	// Emails, Pushes and Digests count the deliveries created.
	Emails, Pushes, Digests int
	// DigestMembers is the number of members whose digest time had come.
	DigestMembers int
	// Statements is the number of statements the round sent to Postgres
	// (transaction control included): the same whatever it handled.
	Statements int
}

// escalationLock is the advisory lock key of a round: one round at a time over
// the whole database, so several processes never escalate twice.
const escalationLock = 0x6c6b_7374_6573_6331 // "lkstesc1"

// RunEscalationRound runs one escalation round in one transaction of a fixed
// number of statements: it takes the round lock (or does nothing when another
// process holds it), then in one statement finds the due episodes by index,
// checks that each still has an unseen message and that its client still
// watches its sensor, reads the members' preferences and push targets, inserts
// an email delivery (once_per_unread) and a push delivery per target, marks the
// episodes handled, and does the same for the digest members whose digest time
// came. Deliveries and marks commit together: a crash loses or repeats none.
// An episode about a sensor costs its deliveries alone: what its email lists
// and what its push says are read from the delivery when it is sent
// (MemberEmails, PushRequests); a free-form one's and a digest's also have a
// member_emails or pushes row.
func (p *Postgres) RunEscalationRound(ctx context.Context, r EscalationRound) (EscalationResult, error) {
	if r.Limit <= 0 {
		return EscalationResult{}, fmt.Errorf("escalation round: limit %d must be positive", r.Limit)
	}
	res := EscalationResult{Statements: 2} // BEGIN, COMMIT
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		res.Statements++
		// The round's statement is planned once and runs once: compiling it
		// (JIT) costs more than it saves, and its sorts and hashes of a full
		// round spill to disk under the default work_mem.
		var jit, workMem string
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1), set_config('jit', 'off', true),
			set_config('work_mem', '64MB', true)`, int64(escalationLock)).Scan(&res.Ran, &jit, &workMem); err != nil {
			return err
		}
		if !res.Ran {
			return nil
		}
		res.Statements++
		return tx.QueryRow(ctx, escalationRoundSQL,
			r.Now, r.Now.Add(-r.EmailAfter), r.Now.Add(-r.PushAfter), r.Now.Add(-r.EmailAfter/4),
			r.Now.Add(-r.PushAfter/4), r.Limit, UnseenPushPrototype,
		).Scan(&res.Episodes, &res.Emails, &res.Pushes, &res.Digests, &res.DigestMembers)
	})
	if err != nil {
		return EscalationResult{}, fmt.Errorf("running an escalation round: %w", err)
	}
	res.Full = res.Episodes >= r.Limit || res.DigestMembers >= r.Limit
	return res, nil
}

// escalationIDs is the round's CTE ids: what its delivery ids are made of.
// Each is a UUIDv7 (RFC 9562) of the round's millisecond whose last 62 bits
// count up from a random start (the standard's "monotonic random" method):
// prefix holds the time, the version and 12 random bits, base the random start
// of the last 64 bits (variant 10, two bits of headroom), and row n of a CTE
// gets prefix || hex(base + offset + n), the offsets keeping the CTEs' ranges
// apart. Made once per round, this costs a fifth of a lockstream_uuid_v7() per
// row, and ids that rise within the round land at the right edge of the
// outbox's primary key. Two rounds in one millisecond share 72 random bits by
// chance only; should they, the primary key refuses the second round whole.
const escalationIDs = `SELECT lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
	       || '7' || substr(r.hex, 1, 3) AS prefix,
	       -9223372036854775808 + ('x' || substr(r.hex, 4, 15))::bit(60)::bigint AS base
	FROM (SELECT replace(gen_random_uuid()::text, '-', '') AS hex) r`

// escalationRoundSQL is the round's one statement. $1 now, $2/$3 the latest
// opening of a due email/push, $4/$5 the same from a critical message, $6 the
// limit, $7 the push prototype. Its cost is the rows it writes (bench/RESULTS.md
// "Escalation round"): two deliveries per episode, each in five indexes of the
// outbox, and the episode's new version; so an episode about a sensor gets no
// member_emails or pushes row (its delivery says what they would), and the ids
// are made once per round rather than once per row (escalationIDs).
const escalationRoundSQL = `
WITH cand AS (
	(SELECT member_id, key FROM escalation_episodes WHERE email_at IS NULL AND opened_at <= $2
	 ORDER BY opened_at LIMIT $6)
	UNION
	(SELECT member_id, key FROM escalation_episodes WHERE push_at IS NULL AND opened_at <= $3
	 ORDER BY opened_at LIMIT $6)
	UNION
	(SELECT member_id, key FROM escalation_episodes
	 WHERE critical_at IS NOT NULL AND (email_at IS NULL OR push_at IS NULL)
	   AND ((email_at IS NULL AND critical_at <= $4) OR (push_at IS NULL AND critical_at <= $5))
	 ORDER BY critical_at LIMIT $6)
), due AS MATERIALIZED (
	SELECT e.member_id, e.key, e.client_id, e.sensor_id, e.type, e.first_seq,
	       e.email_at IS NULL AND (e.opened_at <= $2 OR e.critical_at <= $4) AS email_due,
	       e.push_at IS NULL AND (e.opened_at <= $3 OR e.critical_at <= $5) AS push_due,
	       EXISTS (SELECT 1 FROM inbox_messages x
	               WHERE x.member_id = e.member_id AND ` + episodeKeyX + ` = e.key AND x.seq >= e.first_seq
	                 AND ` + episodeUnseen + `) AS unseen,
	       (e.sensor_id IS NULL OR EXISTS (SELECT 1 FROM client_sensors l
	                                       WHERE l.client_id = e.client_id AND l.sensor_id = e.sensor_id)) AS access
	FROM escalation_episodes e JOIN cand c ON c.member_id = e.member_id AND c.key = e.key
	ORDER BY e.opened_at LIMIT $6
), ids AS MATERIALIZED (
	` + escalationIDs + `
), live AS (
	-- Preferences are read once per member, not once per episode.
	SELECT d.*, m.wants_email, m.wants_push FROM due d JOIN (
		SELECT id, preferences ->> 'email' = 'once_per_unread' AND coalesce(email, '') <> '' AS wants_email,
		       (preferences ->> 'push')::boolean IS NOT FALSE AS wants_push
		FROM members
	) m ON m.id = d.member_id
	WHERE d.unseen AND d.access
), mail AS MATERIALIZED (
	SELECT (i.prefix || to_hex(i.base + row_number() OVER ()))::uuid AS id, l.*
	FROM live l, ids i
	WHERE l.email_due AND l.wants_email
), push AS MATERIALIZED (
	SELECT (i.prefix || to_hex(i.base + 2 * $6::bigint + row_number() OVER ()))::uuid AS id, l.*, t.platform, t.push_key
	FROM live l JOIN member_push_targets t ON t.member_id = l.member_id, ids i
	WHERE l.push_due AND l.wants_push
), dg AS MATERIALIZED (
	SELECT m.id AS member_id, m.client_id, m.email, mi.last_seq, coalesce(md.digest_seq, 0) AS from_seq, s.slot
	FROM members m
	JOIN member_inbox mi ON mi.member_id = m.id
	LEFT JOIN member_digests md ON md.member_id = m.id
	CROSS JOIN LATERAL (
		SELECT max(z.slot) AS slot FROM (
			SELECT ((($1::timestamptz AT TIME ZONE m.timezone)::date - v.d) + t.hm::time) AT TIME ZONE m.timezone AS slot
			FROM jsonb_array_elements_text(m.preferences -> 'digest_times') AS t (hm), (VALUES (0), (1)) AS v (d)
		) z WHERE z.slot <= $1
	) s
	WHERE m.preferences ->> 'email' = 'digest' AND s.slot > coalesce(md.slot, m.updated_at)
	LIMIT $6
), dmail AS MATERIALIZED (
	SELECT (i.prefix || to_hex(i.base + $6::bigint + row_number() OVER ()))::uuid AS id, g.* FROM dg g, ids i
	WHERE coalesce(g.email, '') <> '' AND EXISTS (
		SELECT 1 FROM inbox_messages x
		WHERE x.member_id = g.member_id AND x.seq > g.from_seq AND x.seq <= g.last_seq AND ` + episodeUnseen + `
		  AND (x.sensor_id IS NULL OR EXISTS (SELECT 1 FROM client_sensors l
		                                      WHERE l.client_id = g.client_id AND l.sensor_id = x.sensor_id)))
), digested AS (
	INSERT INTO member_digests (member_id, digest_seq, slot)
	SELECT member_id, last_seq, slot FROM dg
	ON CONFLICT (member_id) DO UPDATE SET digest_seq = excluded.digest_seq, slot = excluded.slot
), deliveries_added AS (
	INSERT INTO deliveries (id, client_id, sensor_id, event_type, channel, target, state, next_attempt_at, event_at)
	SELECT id, client_id, sensor_id, 'unseen', 'email', 'member:' || member_id, 'PENDING', $1, $1 FROM mail
	UNION ALL
	SELECT id, client_id, sensor_id, 'unseen', 'swrve', platform || ':' || push_key, 'PENDING', $1, $1 FROM push
	UNION ALL
	SELECT id, client_id, NULL, 'digest', 'email', 'member:' || member_id, 'PENDING', $1, $1 FROM dmail
), emails_added AS (
	-- Only free-form episodes (their delivery has no sensor to name the key) and digests.
	INSERT INTO member_emails (delivery_id, event_at, member_id, kind, key, from_seq, to_seq)
	SELECT id, $1, member_id, 'unseen', key, first_seq - 1, NULL FROM mail WHERE sensor_id IS NULL
	UNION ALL
	SELECT id, $1, member_id, 'digest', NULL, from_seq, last_seq FROM dmail
), pushes_added AS (
	-- Only free-form episodes: PushRequests reads a sensor's from its delivery.
	INSERT INTO pushes (delivery_id, platform, message_prototype_key, push_key, message, window_at, received_at)
	SELECT id, platform, $7, push_key, 'You have unseen notifications: ' || type, $1, $1
	FROM push WHERE sensor_id IS NULL
), marked AS (
	UPDATE escalation_episodes e
	SET email_at = CASE WHEN d.email_due THEN $1 ELSE e.email_at END,
	    push_at = CASE WHEN d.push_due THEN $1 ELSE e.push_at END
	FROM due d
	WHERE e.member_id = d.member_id AND e.key = d.key AND e.first_seq = d.first_seq
)
SELECT (SELECT count(*) FROM due), (SELECT count(*) FROM mail), (SELECT count(*) FROM push),
       (SELECT count(*) FROM dmail), (SELECT count(*) FROM dg)`

// MemberEmailKind tells an episode's email from a digest.
type MemberEmailKind string

// The kinds of member emails.
const (
	MemberEmailUnseen MemberEmailKind = "unseen"
	MemberEmailDigest MemberEmailKind = "digest"
	// MemberEmailMessage mails one free-form notification as it arrives
	// (POST /v1/notifications with "email": true), seen or not.
	MemberEmailMessage MemberEmailKind = "message"
)

// Bounds of what a member email lists.
const (
	// MaxUnseenListed is the most messages an episode's email lists (newest first).
	MaxUnseenListed = 20
	// MaxDigestListed is the most messages a digest lists (newest first).
	MaxDigestListed = 100
)

// MemberEmail is what an escalation email delivery sends, read right before
// the attempt: the member's address now and the messages still unseen, of
// sensors its client still watches.
type MemberEmail struct {
	DeliveryID string
	Kind       MemberEmailKind
	// MemberExists is false when the member was deleted.
	MemberExists bool
	MemberName   string
	// Email is empty when the member has no address any more.
	Email    string
	Timezone string
	// Messages are newest first.
	Messages []InboxMessage
}

// MemberEmails reads the escalation emails among the deliveries, by delivery
// id, in one query; ids of other deliveries are missing from the map.
func (p *Postgres) MemberEmails(ctx context.Context, deliveryIDs []string) (map[string]MemberEmail, error) {
	out := make(map[string]MemberEmail, len(deliveryIDs))
	ids := make([]string, 0, len(deliveryIDs))
	for _, id := range deliveryIDs {
		if uuid.Validate(id) == nil {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := p.pool.Query(ctx, `
		SELECT me.delivery_id::text, me.kind, mb.id IS NOT NULL, coalesce(mb.name, ''), coalesce(mb.email, ''),
		       coalesce(mb.timezone, 'UTC'), m.id IS NOT NULL, `+inboxColumns+`
		FROM `+memberEmailRows+` me
		LEFT JOIN members mb ON mb.id = me.member_id
		LEFT JOIN LATERAL (
			SELECT x.* FROM inbox_messages x
			WHERE x.member_id = me.member_id AND x.seq > me.from_seq AND (me.to_seq IS NULL OR x.seq <= me.to_seq)
			  AND (me.key IS NULL OR `+episodeKeyX+` = me.key)
			  AND (me.kind = 'message' AND x.deleted_at IS NULL OR `+episodeUnseen+`)
			  AND (x.sensor_id IS NULL OR EXISTS (SELECT 1 FROM client_sensors l
			                                      WHERE l.client_id = mb.client_id AND l.sensor_id = x.sensor_id))
			ORDER BY x.seq DESC
			LIMIT CASE WHEN me.kind = 'digest' THEN $2::int ELSE $3::int END
		) m ON true
		LEFT JOIN sensors s ON s.id = m.sensor_id
		ORDER BY me.delivery_id, m.seq DESC`, ids, MaxDigestListed, MaxUnseenListed)
	if err != nil {
		return nil, fmt.Errorf("reading member emails: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			e       MemberEmail
			kind    string
			hasMsg  bool
			msg     memberEmailMessage
			message []byte
		)
		if err := rows.Scan(&e.DeliveryID, &kind, &e.MemberExists, &e.MemberName, &e.Email, &e.Timezone, &hasMsg,
			&msg.id, &msg.memberID, &msg.seq, &msg.clientID, &msg.typ, &msg.sensorID, &msg.address, &msg.data,
			&msg.previous, &msg.at, &msg.severity, &msg.cause, &msg.subject, &message, &msg.seenAt,
			&msg.createdAt, &msg.site); err != nil {
			return nil, fmt.Errorf("reading member emails: %w", err)
		}
		e.Kind = MemberEmailKind(kind)
		if prev, ok := out[e.DeliveryID]; ok {
			e = prev
		}
		if hasMsg {
			e.Messages = append(e.Messages, msg.inbox(message))
		}
		out[e.DeliveryID] = e
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading member emails: %w", err)
	}
	return out, nil
}

// memberEmailMessage scans the nullable message columns of MemberEmails.
type memberEmailMessage struct {
	id, memberID, clientID, typ, sensorID, address, site, severity, cause, subject *string
	seq                                                                            *int64
	data, previous                                                                 *int16
	at, createdAt, seenAt                                                          *time.Time
}

func (m memberEmailMessage) inbox(message []byte) InboxMessage {
	str := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	out := InboxMessage{ID: str(m.id), MemberID: str(m.memberID), ClientID: str(m.clientID), Type: str(m.typ),
		SensorID: str(m.sensorID), SensorAddress: str(m.address), SensorSite: str(m.site), Severity: str(m.severity), Cause: str(m.cause),
		Subject: str(m.subject), Data: outboxIntPtr(m.data), Previous: outboxIntPtr(m.previous), SeenAt: m.seenAt}
	if m.seq != nil {
		out.Seq = *m.seq
	}
	if m.at != nil {
		out.At = *m.at
	}
	if m.createdAt != nil {
		out.CreatedAt = *m.createdAt
	}
	if message != nil {
		out.Message = json.RawMessage(message)
	}
	return out
}
