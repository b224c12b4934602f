package incident

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/storage"
)

// Round is what one reminder round does.
type Round struct {
	// Now is the round's clock: tiers due at or before it are reminded.
	Now time.Time
	// Limit bounds the due tiers one round claims.
	Limit int
	// PublicURL, when set, puts a one-click ack link (PublicURL/ack/<token>)
	// in every reminder; AckTTL is how long it works.
	PublicURL string
	AckTTL    time.Duration
}

// RoundResult says what a reminder round did.
type RoundResult struct {
	// Tiers is the number of due tiers claimed; Full reports that it reached
	// the limit, so more may be due.
	Tiers int
	Full  bool
	// Reminders is the number of inbox messages added.
	Reminders int
	// Statements is the number of statements sent (BEGIN and COMMIT
	// included): the same whatever the round handled.
	Statements int
}

// ReminderType is the inbox message type of a reminder.
const ReminderType = "incident_reminder"

// RemindRound runs one reminder round in one transaction of a fixed number
// of statements whatever the number of incidents (four: BEGIN, the settings,
// remindSQL, COMMIT).
// Several processes may run rounds at once: each claims the due tiers no
// other holds (SKIP LOCKED) and moves their next_at on before committing, so
// no member is reminded twice for one due time; a crash rolls the claim back
// with the reminders, so none is skipped either.
func (p *PostgresStore) RemindRound(ctx context.Context, r Round) (RoundResult, error) {
	if r.Limit <= 0 {
		return RoundResult{}, fmt.Errorf("reminder round: limit %d must be positive", r.Limit)
	}
	res := RoundResult{Statements: 4}
	var notified int
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		// The round's statement is planned once and runs once: compiling it
		// (JIT) costs more than it saves, and a full round's sorts and hashes
		// spill to disk under the default work_mem.
		if _, err := tx.Exec(ctx, `SELECT set_config('jit', 'off', true), set_config('work_mem', '64MB', true)`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, remindSQL, r.Now, r.Limit, r.PublicURL, r.Now.Add(r.AckTTL)).
			Scan(&res.Tiers, &res.Reminders, &notified)
	})
	if err != nil {
		return RoundResult{}, fmt.Errorf("running a reminder round: %w", storage.MapError(err))
	}
	res.Full = res.Tiers >= r.Limit
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

// remindSQL is a reminder round's statement. $1 now, $2 the limit, $3 the
// public URL (” for no link), $4 when the round's ack links expire.
//
// It claims the due tiers by index (next_at <= now) in due order, skipping
// rows another round holds, moves each next_at on by repeat_every (NULL once
// past stop_at: the tier is done), and for the claimed tiers of incidents
// still open picks each tier's members (NULL members: every member of the
// client) whose routing lets the incident through, once per (incident,
// member); for each it makes a random ack token (stored hashed), writes a
// timeline entry and an inbox message incident_reminder (storage's inbox
// write: seqs, escalation episode, NOTIFY for the streams).
const remindSQL = `
WITH due AS MATERIALIZED (
	SELECT t.incident_id, t.tier, t.next_at, t.members, t.repeat_every, t.stop_at
	FROM incident_tiers t
	WHERE t.next_at IS NOT NULL AND t.next_at <= $1
	ORDER BY t.next_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), claimed AS (
	UPDATE incident_tiers t
	SET next_at = CASE WHEN d.next_at + d.repeat_every <= d.stop_at THEN d.next_at + d.repeat_every END
	FROM due d
	WHERE t.incident_id = d.incident_id AND t.tier = d.tier
), inc AS (
	SELECT d.incident_id, d.tier, d.next_at AS due_at, d.members, i.client_id, i.sensor_id, i.site, i.severity,
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
	SELECT DISTINCT ON (incident_id, member_id) *,
	       replace(gen_random_uuid()::text, '-', '') AS token
	FROM listed
	ORDER BY incident_id, member_id, tier
), tokens AS (
	INSERT INTO incident_ack_tokens (hash, incident_id, member_id, expires_at)
	SELECT sha256(convert_to(token, 'UTF8')), incident_id, member_id, $4 FROM rcpt
), timeline AS (
	INSERT INTO incident_timeline (incident_id, at, kind, member_id, channel, detail)
	SELECT incident_id, $1, 'reminder', member_id, 'inbox', 'tier ' || tier || ', due ' || due_at FROM rcpt
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
	` + inbox.WriteNotified + `
SELECT (SELECT count(*) FROM due), (SELECT count(*) FROM ins), (SELECT count(*) FROM notified)`
