package fanout

// The fan-out's event messages: who of a new notification's client gets a
// message (routing), its severity and outage text, written through the inbox's
// statement (inbox.Write) inside the fan-out's transaction.

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/storage"
)

// eventWriteRows is inbox.WriteRows for the fan-out's event messages: in the
// same statement, a digest member (who gets no episode email) with an address
// gets an email at once for each sensor it got a critical message about (an
// episode email from that message on, as the escalation round queues them),
// and the retriers are woken for it on commit. A critical message is never
// held for a digest (DESIGN.md "Quiet hours").
const eventWriteRows = inbox.Write + `, crit AS MATERIALIZED (
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
	SELECT count(pg_notify('` + storage.OutboxChannel + `', 'email')) AS n FROM (SELECT 1 FROM crit LIMIT 1) x
)
SELECT ` + inbox.RowColumns + `
	FROM ins m LEFT JOIN sensors s ON s.id = m.sensor_id CROSS JOIN woke
	ORDER BY m.notification_id, m.member_id`

// eventMessageArgs are the arrays of the new notifications' messages, the
// parameters $1-$11 of eventMessagesNN.
func eventMessageArgs(events []storage.NotificationInput, created []storage.NewNotification) []any {
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
		e := events[n.Event]
		ids[i], clients[i], ords[i] = n.ID, n.ClientID, n.Event
		types[i], sensors[i], times[i] = e.Type, e.SensorID, e.At
		data[i], previous[i] = int16Ptr(e.Data), int16Ptr(e.Previous)
		subjects[i], messages[i] = outageMessage(e)
		sites[i] = e.Site
	}
	return []any{ids, clients, types, sensors, data, previous, times, ords, subjects, messages, sites}
}

// eventMessagesNN is the CTE nn of the new notifications' messages (from
// eventMessageArgs), with their severity and site.
func eventMessagesNN() string {
	return `nn AS (
			SELECT x.*, ` + fmt.Sprintf(inbox.EventSeverity, "x") + ` AS severity,
			       -- The message's site: a site event's, or its sensor's.
			       coalesce(nullif(x.site, ''), (SELECT s.site FROM sensors s WHERE s.id = x.sensor_id)) AS msg_site
			FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::int2[], $6::int2[],
			            $7::timestamptz[], $8::int[], $9::text[], $10::text[], $11::text[])
				AS x (notification_id, client_id, type, sensor_id, data, previous, event_at, ord, subject, message, site)
		)`
}

// queueSharedMessages queues the statement that writes, for each new
// notification whose client's members all get its message alike, one shared
// inbox message (inbox.WriteShared) instead of one per member, and the read of
// each member's copy with its seq, stored in added (the caller announces them:
// inbox.Notify). A notification is shared when its client has members, every
// one of them is routed to it (lockstream_routes; only the members whose
// routing filters anything are read: storage.MemberRoutingRestricts), and it does not make a
// digest member's critical email at once (eventWriteRows writes those); a
// client's notifications of the batch are shared all or none, so that each
// member's seqs follow the events' order.
func queueSharedMessages(b *pgx.Batch, events []storage.NotificationInput, created []storage.NewNotification, added *[]inbox.Added) {
	if len(created) == 0 {
		return
	}
	storage.QueueQuery(b, "writing shared inbox messages", `
		WITH `+eventMessagesNN()+`, ok AS (
			SELECT nn.*, EXISTS (SELECT 1 FROM members m WHERE m.client_id = nn.client_id)
			       AND NOT EXISTS (SELECT 1 FROM members m WHERE m.client_id = nn.client_id
			                       AND `+storage.MemberRoutingRestricts("m")+`
			                       AND NOT coalesce(`+storage.MemberRoutes("m", "nn.sensor_id", "nn.msg_site", "nn.severity")+`, false))
			       AND NOT (nn.severity = 'critical' AND EXISTS (
			           SELECT 1 FROM members m WHERE m.client_id = nn.client_id
			           AND m.preferences ->> 'email' = 'digest' AND coalesce(m.email, '') <> '')) AS shareable
			FROM nn
		), t AS (
			SELECT client_id, notification_id, type, sensor_id, data, previous, event_at, severity, 'event' AS cause,
			       subject, message::jsonb AS message, ord
			FROM (SELECT ok.*, bool_and(shareable) OVER (PARTITION BY client_id) AS all_shareable FROM ok) x
			WHERE all_shareable
		`+inbox.WriteShared, func(rows pgx.Rows) error {
		rows.Close()
		return rows.Err()
	}, eventMessageArgs(events, created)...)
	ids := make([]string, len(created))
	for i, n := range created {
		ids[i] = n.ID
	}
	inbox.QueueSharedAudience(b, ids, added)
}

// queueEventMessages queues the statement that puts one message per member of
// each new notification's client whose routing lets it through
// (lockstream_routes) into the members' inboxes, one statement whatever the
// number of members, inside the fan-out's transaction — but for the
// notifications queueSharedMessages shared; the
// messages it added are stored in added when the batch's results arrive (the
// caller announces them: inbox.Notify).
func queueEventMessages(b *pgx.Batch, events []storage.NotificationInput, created []storage.NewNotification, added *[]inbox.Added) {
	if len(created) == 0 {
		return
	}
	storage.QueueQuery(b, "inserting inbox messages", `
		WITH `+eventMessagesNN()+`, t AS (
			SELECT m.id AS member_id, nn.client_id, nn.notification_id, nn.type, nn.sensor_id, nn.data, nn.previous,
			       nn.event_at, nn.severity, 'event' AS cause, nn.subject, nn.message::jsonb AS message, nn.ord
			FROM nn JOIN members m ON m.client_id = nn.client_id
			-- Each member hears only what its routing lets through; a shared
			-- message (queueSharedMessages) has been written for all already.
			WHERE `+storage.MemberRoutes("m", "nn.sensor_id", "nn.msg_site", "nn.severity")+`
			  AND NOT EXISTS (SELECT 1 FROM inbox_shared e WHERE e.notification_id = nn.notification_id)
		`+eventWriteRows, func(rows pgx.Rows) error {
		var err error
		*added, err = inbox.CollectAdded(rows)
		return err
	}, eventMessageArgs(events, created)...)
}

// outageMessage is the subject and message (JSON) of a connection_restored's
// inbox message that knows how long its sensor was lost: "back after 2 h
// 14 min" and {"lost_since":…,"silent_seconds":…}; nil for other events.
func outageMessage(e storage.NotificationInput) (subject, message *string) {
	if e.Type != string(event.ConnectionRestored) || e.LostSince == nil {
		return nil, nil
	}
	silent := event.SilentSeconds(e.LostSince, e.At)
	s := "back after " + event.Outage(silent)
	m := fmt.Sprintf(`{"lost_since":%q,"silent_seconds":%d}`, e.LostSince.UTC().Format(time.RFC3339Nano), silent)
	return &s, &m
}
