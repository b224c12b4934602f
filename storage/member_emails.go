package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/lockstream/lockstream/inbox"
)

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
	Messages []inbox.Message
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
		       coalesce(mb.timezone, 'UTC'), m.id IS NOT NULL, `+inbox.Columns+`
		FROM `+memberEmailRows+` me
		LEFT JOIN members mb ON mb.id = me.member_id
		LEFT JOIN LATERAL (
			SELECT x.* FROM inbox_messages x
			WHERE x.member_id = me.member_id
			  AND (me.kind = 'round' AND EXISTS (
			           SELECT 1 FROM escalation_episodes e
			           WHERE e.member_id = x.member_id AND e.key = `+inbox.EpisodeKey+` AND e.first_seq > me.from_seq
			             AND e.first_seq <= me.to_seq AND x.seq >= e.first_seq AND e.email_at IS NULL)
			       OR me.kind <> 'round' AND x.seq > me.from_seq AND (me.to_seq IS NULL OR x.seq <= me.to_seq)
			          AND (me.key IS NULL OR `+inbox.EpisodeKey+` = me.key))
			  AND (me.kind = 'message' AND x.deleted_at IS NULL OR `+inbox.EpisodeUnseen+`)
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
			e.Messages = append(e.Messages, msg.message(message))
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

func (m memberEmailMessage) message(message []byte) inbox.Message {
	str := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	out := inbox.Message{ID: str(m.id), MemberID: str(m.memberID), ClientID: str(m.clientID), Type: str(m.typ),
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
