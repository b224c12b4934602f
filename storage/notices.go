package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/lockstream/lockstream/inbox"
)

// Operational notices (docs/DESIGN.md "Operational notices"): the health of a
// client's webhook endpoint becomes endpoint_failing, endpoint_disabled and
// endpoint_recovered events (endpoint_events), which PublishEndpointNotices
// puts on the client's feed and into its members' inboxes and
// MailEndpointNotices mails to its address. None goes by webhook.

// DefaultEndpointFailingAfter is how many consecutive failed attempts make an
// endpoint failing when the caller gives no threshold.
const DefaultEndpointFailingAfter = 5

// WebhookOutcome is one recorded webhook attempt, for its endpoint's health.
type WebhookOutcome struct {
	ClientID string
	// OK reports whether the receiver accepted it.
	OK bool
	At time.Time
}

// RecordWebhookHealth folds a batch of webhook attempts into their endpoints'
// health, in one statement: an accepted attempt makes the endpoint healthy
// (failing since the first failure after it, if any), a failure starts the
// failing period (webhook_failing_since) if none is running and counts. Client
// rows are locked in id order, so concurrent batches never deadlock, and only
// those whose health changes (or that carry a notice) are locked and written.
//
// The same statement gives the operational notices: an endpoint with
// failingAfter or more consecutive failures and no notice for its streak yet
// gets one endpoint_failing event (notice state 'failing'); one that had a
// notice (failing, or disabled and enabled since) and whose batch ends with
// fewer failures after a success gets endpoint_recovered (state ”). The
// state is read from the locked row, so two retrier processes give one notice.
// A failingAfter below 1 means DefaultEndpointFailingAfter.
// It returns how many notices it recorded, for the caller to publish.
func (p *Postgres) RecordWebhookHealth(ctx context.Context, outcomes []WebhookOutcome, failingAfter int) (int, error) {
	if len(outcomes) == 0 {
		return 0, nil
	}
	if failingAfter < 1 {
		failingAfter = DefaultEndpointFailingAfter
	}
	ids := make([]string, 0, len(outcomes))
	oks := make([]bool, 0, len(outcomes))
	ats := make([]time.Time, 0, len(outcomes))
	for _, o := range outcomes {
		if uuid.Validate(o.ClientID) != nil {
			continue
		}
		ids, oks, ats = append(ids, o.ClientID), append(oks, o.OK), append(ats, o.At)
	}
	var notices int
	err := p.pool.QueryRow(ctx, recordWebhookHealthSQL, ids, oks, ats, failingAfter).Scan(&notices)
	if err != nil {
		return 0, fmt.Errorf("recording the health of %d webhook attempts: %w", len(ids), err)
	}
	return notices, nil
}

// recordWebhookHealthSQL is RecordWebhookHealth's statement: $1-$3 the
// outcomes, $4 the failing threshold.
const recordWebhookHealthSQL = `
		WITH o AS (
			SELECT * FROM unnest($1::uuid[], $2::bool[], $3::timestamptz[]) AS o (client_id, ok, at)
		), h AS (
			SELECT client_id, max(at) FILTER (WHERE ok) AS last_ok, max(at) AS last_at
			FROM o GROUP BY client_id
		), agg AS (
			-- Failures after the batch's last success (all of them when none).
			SELECT h.client_id, h.last_ok, h.last_at,
			       min(o.at) FILTER (WHERE NOT o.ok AND (h.last_ok IS NULL OR o.at > h.last_ok)) AS first_fail,
			       count(*) FILTER (WHERE NOT o.ok AND (h.last_ok IS NULL OR o.at > h.last_ok)) AS fails
			FROM h JOIN o ON o.client_id = h.client_id
			GROUP BY h.client_id, h.last_ok, h.last_at
		), locked AS (
			-- Only the rows that change (an endpoint that stays healthy is not
			-- written at every batch), in id order; NO KEY UPDATE leaves the
			-- fan-out's KEY SHARE on the client free. A row another batch
			-- changed meanwhile is read as that batch left it.
			SELECT c.id, c.webhook_failing_since, c.webhook_failures, c.endpoint_notice,
			       c.endpoint_disabled_at IS NULL AS enabled
			FROM clients c JOIN agg ON agg.client_id = c.id
			WHERE agg.last_ok IS NULL OR c.webhook_failing_since IS DISTINCT FROM agg.first_fail
			   OR c.webhook_failures <> agg.fails OR c.endpoint_notice <> ''
			ORDER BY c.id FOR NO KEY UPDATE OF c
		), nx AS (
			SELECT l.id, l.endpoint_notice AS old_notice, l.enabled, agg.last_ok, agg.last_at,
			       CASE WHEN agg.last_ok IS NOT NULL THEN agg.first_fail
			            ELSE coalesce(l.webhook_failing_since, agg.first_fail) END AS failing_since,
			       CASE WHEN agg.last_ok IS NOT NULL THEN agg.fails
			            ELSE l.webhook_failures + agg.fails END AS failures
			FROM locked l JOIN agg ON agg.client_id = l.id
		), st AS (
			SELECT nx.*, CASE
			           -- A new streak: nothing said yet, or disabled and enabled since.
			           WHEN nx.failures >= $4 AND nx.enabled AND nx.old_notice IN ('', 'disabled') THEN 'failing'
			           WHEN nx.last_ok IS NOT NULL AND nx.failures < $4 AND nx.enabled THEN ''
			           ELSE nx.old_notice END AS notice
			FROM nx
		), u AS (
			UPDATE clients c
			SET webhook_failing_since = st.failing_since, webhook_failures = st.failures, endpoint_notice = st.notice
			FROM st WHERE c.id = st.id
		), ev AS (
			INSERT INTO endpoint_events (client_id, type, detail, at)
			SELECT st.id,
			       CASE st.notice WHEN 'failing' THEN 'endpoint_failing' ELSE 'endpoint_recovered' END,
			       CASE st.notice
			            WHEN 'failing' THEN format('%s consecutive webhook attempts failed since %s',
			                                       st.failures, st.failing_since)
			            ELSE format('a webhook attempt succeeded at %s', st.last_ok) END,
			       CASE st.notice WHEN 'failing' THEN st.last_at ELSE st.last_ok END
			FROM st WHERE st.notice <> st.old_notice
			ORDER BY st.id
			RETURNING 1
		)
		SELECT count(*) FROM ev`

// noticeEventPrefix starts the event id of a notice's notification: the
// endpoint event's id follows, so publishing one twice adds nothing.
const noticeEventPrefix = "endpoint:"

// PublishEndpointNotices puts up to limit unpublished operational notices, oldest
// first, on their clients' feeds (a notification with the client's next seq and
// no delivery: the failing webhook is never told) and into every member's
// inbox (a message of the notice's type, its detail as the subject), in one
// transaction that holds the notices (FOR UPDATE SKIP LOCKED): concurrent
// callers publish each once. It returns how many it published.
func (p *Postgres) PublishEndpointNotices(ctx context.Context, limit int) (int, error) {
	published := 0
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, publishNoticesSQL, limit, noticeEventPrefix)
		if err != nil {
			return err
		}
		var (
			inputs  []NotificationInput
			created []NewNotification
			details []string
		)
		for rows.Next() {
			var in NotificationInput
			var n NewNotification
			var detail string
			var notification *string
			if err := rows.Scan(&in.EventID, &in.Type, &in.At, &n.ClientID, &detail, &notification); err != nil {
				rows.Close()
				return err
			}
			published++
			if notification == nil {
				continue // its client is gone, or it was on the feed already
			}
			n.ID, n.Event = *notification, len(inputs)
			inputs, created, details = append(inputs, in), append(created, n), append(details, detail)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(created) == 0 {
			return nil
		}
		var added []inbox.Added
		b := &pgx.Batch{}
		QueueClientLocks(b, created)
		queueNoticeMessages(b, inputs, created, details, &added)
		QueueClientSeqs(b, inputs, created)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		return inbox.Notify(ctx, tx, added)
	})
	if err != nil {
		return 0, fmt.Errorf("publishing endpoint notices: %w", err)
	}
	return published, nil
}

// publishNoticesSQL takes up to $1 unpublished notices, marks them published
// and makes each its client's notification (event id $2 || the notice's id; no
// sensor), returning one row per notice with the new notification's id (NULL
// when none was made).
const publishNoticesSQL = `
		WITH e AS (
			SELECT e.id, e.client_id, e.type, e.detail, e.at FROM endpoint_events e
			WHERE e.published_at IS NULL AND e.type <> 'endpoint_enabled'
			ORDER BY e.id LIMIT $1
			FOR UPDATE OF e SKIP LOCKED
		), marked AS (
			UPDATE endpoint_events x SET published_at = now() FROM e WHERE x.id = e.id
		), n AS (
			INSERT INTO notifications (id, event_id, client_id, sensor_id, type, event_at)
			SELECT lockstream_notification_id($2 || e.id, e.client_id, e.at), $2 || e.id, e.client_id, '', e.type, e.at
			FROM e JOIN clients c ON c.id = e.client_id
			ORDER BY e.id
			-- The id is made from (event id, client, time): the primary key
			-- holds the notification's uniqueness (migration 00246).
			ON CONFLICT (id, event_at) DO NOTHING
			RETURNING id, event_id
		)
		SELECT $2 || e.id, e.type, e.at, e.client_id::text, e.detail, n.id::text
		FROM e LEFT JOIN n ON n.event_id = $2 || e.id
		ORDER BY e.id`

// queueNoticeMessages queues the statement that puts each new notice in the
// inbox of every member of its client whose routing lets its severity through: severity as event.SeverityOf grades the
// notice, no sensor, the notice's detail as the subject.
func queueNoticeMessages(b *pgx.Batch, events []NotificationInput, created []NewNotification, details []string, added *[]inbox.Added) {
	ids := make([]string, len(created))
	clients := make([]string, len(created))
	types := make([]string, len(created))
	times := make([]time.Time, len(created))
	ords := make([]int, len(created))
	for i, n := range created {
		ids[i], clients[i], ords[i], types[i], times[i] = n.ID, n.ClientID, n.Event, events[n.Event].Type, events[n.Event].At
	}
	queueQuery(b, "inserting notice messages", `
		WITH nn AS (
			SELECT x.*, NULL::int2 AS data
			FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::timestamptz[], $5::text[], $6::int[])
				AS x (notification_id, client_id, type, event_at, subject, ord)
		), t AS (
			SELECT m.id AS member_id, nn.client_id, nn.notification_id, nn.type, NULL::text AS sensor_id,
			       NULL::int2 AS data, NULL::int2 AS previous, nn.event_at,
			       `+fmt.Sprintf(inbox.EventSeverity, "nn")+` AS severity, 'event' AS cause,
			       nn.subject, NULL::jsonb AS message, nn.ord
			FROM nn JOIN members m ON m.client_id = nn.client_id
			WHERE `+MemberRoutes("m", "NULL", "NULL", fmt.Sprintf(inbox.EventSeverity, "nn"))+`
		`+inbox.WriteRows, func(rows pgx.Rows) error {
		var err error
		*added, err = inbox.CollectAdded(rows)
		return err
	}, ids, clients, types, times, details, ords)
}
