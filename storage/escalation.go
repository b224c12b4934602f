package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// The escalation-episode key of a message (inbox_messages aliased x, or i): its
// sensor, or '#' and its type for a free-form notification ('#' is in no
// sensor id). It must read as in the index inbox_messages_episode_idx.
const (
	episodeKeyX = `coalesce(x.sensor_id, '#' || x.type)`
	episodeKeyI = `coalesce(i.sensor_id, '#' || i.type)`
)

// InboxEpisodeKey and InboxEpisodeUnseen are the inbox's rules that escalation
// rounds judge episodes by, as SQL over inbox_messages aliased x: a message's
// episode key (as in the index inbox_messages_episode_idx) and whether it
// still counts for its episode.
const (
	InboxEpisodeKey    = episodeKeyX
	InboxEpisodeUnseen = episodeUnseen
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
// requests of the escalation pushes among the deliveries $1, which have no
// pushes row: the device is the delivery's target, $2 the prototype. An
// episode's push (before rounds wrote per member) names its sensor; a round's
// push (a member_emails row of kind 'push': the member and the range of the
// episodes' first_seq) says what is left of its episodes when sent — those
// with an unseen message about a sensor the member's client still watches (or
// free-form): one sensor or type by name, else how many; nothing left (seen
// meanwhile, access lost, member deleted) gives an empty message, which the
// retrier fails as NOTHING_UNSEEN. NOT EXISTS skips the ones queued before the
// round stopped writing pushes rows.
const escalationPushRequests = `
	SELECT d.id::text, split_part(d.target, ':', 1), $2::text, substr(d.target, strpos(d.target, ':') + 1),
	       CASE WHEN d.sensor_id IS NOT NULL THEN 'You have unseen notifications about sensor ' || d.sensor_id
	            WHEN r.n = 1 AND r.k LIKE '#%' THEN 'You have unseen notifications: ' || substr(r.k, 2)
	            WHEN r.n = 1 THEN 'You have unseen notifications about sensor ' || r.k
	            WHEN r.n > 1 AND NOT r.free THEN 'You have unseen notifications about ' || r.n || ' sensors'
	            WHEN r.n > 1 THEN 'You have unseen notifications about ' || r.n || ' subjects'
	            ELSE '' END,
	       '', d.event_at, d.event_at
	FROM deliveries d
	LEFT JOIN member_emails me ON me.delivery_id = d.id AND me.event_at = d.event_at AND me.kind = 'push'
	LEFT JOIN members mb ON mb.id = me.member_id
	LEFT JOIN LATERAL (
		SELECT count(*) AS n, min(e.key) AS k, bool_or(e.sensor_id IS NULL) AS free
		FROM escalation_episodes e
		WHERE e.member_id = me.member_id AND e.first_seq > me.from_seq AND e.first_seq <= me.to_seq
		  AND e.push_at IS NULL
		  AND (e.sensor_id IS NULL OR EXISTS (SELECT 1 FROM client_sensors l
		                                      WHERE l.client_id = mb.client_id AND l.sensor_id = e.sensor_id))
		  AND EXISTS (SELECT 1 FROM inbox_messages x
		              WHERE x.member_id = e.member_id AND ` + episodeKeyX + ` = e.key AND x.seq >= e.first_seq
		                AND ` + episodeUnseen + `)
	) r ON true
	WHERE d.id = ANY ($1::uuid[]) AND d.channel = 'swrve' AND d.notification_id IS NULL
	  AND d.event_type = 'unseen' AND (d.sensor_id IS NOT NULL OR me.delivery_id IS NOT NULL)
	  AND NOT EXISTS (SELECT 1 FROM pushes p WHERE p.delivery_id = d.id)`

// memberEmailRows is what the member emails among the deliveries $1 list, as
// member_emails rows: theirs, and for an episode's email about a sensor (which
// has none) the member of its target and the sensor as key, from seq 0 — the
// member's unseen messages about the sensor are the episode's, since an
// episode opens only when every earlier one is seen or deleted (messages
// marked unseen by the member are left out either way).
const memberEmailRows = `(
		SELECT delivery_id, kind, member_id, key, from_seq, to_seq FROM member_emails
		WHERE delivery_id = ANY ($1::uuid[]) AND kind <> 'push'
		UNION ALL
		SELECT d.id, 'unseen', substr(d.target, length('member:') + 1)::uuid, d.sensor_id, 0, NULL
		FROM deliveries d
		WHERE d.id = ANY ($1::uuid[]) AND d.channel = 'email' AND d.notification_id IS NULL
		  AND d.event_type = 'unseen' AND d.sensor_id IS NOT NULL AND d.target LIKE 'member:%'
		  AND NOT EXISTS (SELECT 1 FROM member_emails e WHERE e.delivery_id = d.id)
	)`

// MemberEmailKind tells an episode's email from a digest.
type MemberEmailKind string

// The kinds of member emails.
const (
	MemberEmailUnseen MemberEmailKind = "unseen"
	MemberEmailDigest MemberEmailKind = "digest"
	// MemberEmailMessage mails one free-form notification as it arrives
	// (POST /v1/notifications with "email": true), seen or not.
	MemberEmailMessage MemberEmailKind = "message"
	// MemberEmailRound is a round's one email to a member: it lists the
	// member's episodes the round escalated by email (first_seq in the row's
	// range), as an episode's email lists one.
	MemberEmailRound MemberEmailKind = "round"
)

// Bounds of what a member email lists.
const (
	// MaxUnseenListed is the most messages an episode's email lists (newest first).
	MaxUnseenListed = 20
	// MaxDigestListed is the most messages a digest or a round's email lists
	// (newest first).
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
			WHERE x.member_id = me.member_id
			  AND (me.kind = 'round' AND EXISTS (
			           SELECT 1 FROM escalation_episodes e
			           WHERE e.member_id = x.member_id AND e.key = `+episodeKeyX+` AND e.first_seq > me.from_seq
			             AND e.first_seq <= me.to_seq AND x.seq >= e.first_seq AND e.email_at IS NULL)
			       OR me.kind <> 'round' AND x.seq > me.from_seq AND (me.to_seq IS NULL OR x.seq <= me.to_seq)
			          AND (me.key IS NULL OR `+episodeKeyX+` = me.key))
			  AND (me.kind = 'message' AND x.deleted_at IS NULL OR `+episodeUnseen+`)
			  AND (x.sensor_id IS NULL OR EXISTS (SELECT 1 FROM client_sensors l
			                                      WHERE l.client_id = mb.client_id AND l.sensor_id = x.sensor_id))
			ORDER BY x.seq DESC
			LIMIT CASE WHEN me.kind IN ('digest', 'round') THEN $2::int ELSE $3::int END
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
