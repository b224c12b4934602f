package escalation

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/internal/pgutil"
)

// PostgresStore runs escalation rounds: the round's rules are its one
// statement (escalationRoundSQL). The episodes it reads are kept by the inbox's
// writes (inbox.EpisodeWrite), whose rules of an episode's key and of an unseen message it
// shares (inbox.EpisodeKey, inbox.EpisodeUnseen); what a round's
// email lists and its push says is read when sent, access checked again then
// (storage.MemberEmails, inbox.PushRequests).
type PostgresStore struct {
	pool *pgxpool.Pool
}

// NewPostgresStore returns the rounds' store over p's pool (p is
// storage.Postgres, which composes this package's statements and so is not
// imported).
func NewPostgresStore(p pgutil.Handle) *PostgresStore {
	return &PostgresStore{pool: p.Pool()}
}

// Round is what one escalation round does.
type Round struct {
	// Now is the round's clock.
	Now time.Time
	// EmailAfter and PushAfter are how long an episode stays open before its
	// email and its push; a quarter of each from its first critical message.
	EmailAfter, PushAfter time.Duration
	// Limit bounds the episodes and the digest members one round handles.
	Limit int
}

// Result says what a round did.
type Result struct {
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

// RunRound runs one escalation round in one transaction of a fixed number of
// statements: it takes the round lock (or does nothing when another process
// holds it), then in one statement finds the due episodes (opened after the
// scan floor, first_seq above their member's cursor), moves each member's
// email and push cursors over them — which marks them handled, one row per
// member, none per episode — and, for a member with one of them still unseen
// and watched, inserts one email delivery (once_per_unread) and one push
// delivery per device listing all of them; and does the same for the digest
// members whose digest time came. Deliveries and cursors commit together: a
// crash loses or repeats none.
func (p *PostgresStore) RunRound(ctx context.Context, r Round) (Result, error) {
	if r.Limit <= 0 {
		return Result{}, fmt.Errorf("escalation round: limit %d must be positive", r.Limit)
	}
	// The round reads members' own inbox rows: copies of shared messages that
	// a fan-out which crashed after its commit left unwritten are written
	// first (nothing to do, two cheap statements, when none wait).
	if _, err := inbox.MaterializeShared(ctx, p.pool); err != nil {
		return Result{}, fmt.Errorf("escalation round: %w", err)
	}
	res := Result{Statements: 6} // the copies' BEGIN, 2 statements, COMMIT; the round's BEGIN, COMMIT
	var due int
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
			r.Now.Add(-r.PushAfter/4), r.Limit, (max(r.EmailAfter, r.PushAfter)+floorMargin).Seconds(),
		).Scan(&due, &res.Episodes, &res.Emails, &res.Pushes, &res.Digests, &res.DigestMembers)
	})
	if err != nil {
		return Result{}, fmt.Errorf("running an escalation round: %w", pgutil.MapError(err))
	}
	res.Full = due >= r.Limit || res.DigestMembers >= r.Limit
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

// floorMargin is how far a round's scan floor stays behind the longest wait:
// an inbox write whose transaction began this long before a round and
// committed after it would open an episode the rounds no longer scan. Inbox
// writes are single statements; ten minutes is far beyond any of them. The
// floor also never passes the database's own clock, so a round clock set ahead
// (tests) does not hide the episodes opened later.
const floorMargin = 10 * time.Minute

// escalationRoundSQL is the round's one statement. $1 now, $2/$3 the latest
// opening of a due email/push, $4/$5 the same from a critical message, $6 the
// limit, $7 how far the scan floor stays behind now (the longest wait and
// floorMargin, in seconds).
//
// It writes per member, not per episode (bench/RESULTS.md "Escalation round:
// per member"): due episodes are those opened after the floor whose first_seq
// is above their member's cursor for the channel (escalation_members); each
// member with due episodes gets its cursors moved to the highest first_seq due,
// which marks every episode up to it handled, and, when one of them still has
// an unseen message its client may see, one email and one push per device,
// each with a member_emails row naming the member and the range of first_seq
// (kind 'round' or 'push'): the email lists, and the push counts, the
// episodes of that range when sent, access checked again then. Episodes
// handled by rounds before the cursors (email_at / push_at set) stay handled.
// When the round was not cut by the limit, the floor moves up to where every
// episode opened is due on both channels.
const escalationRoundSQL = `
WITH due AS MATERIALIZED (
	SELECT d.* FROM (
		SELECT e.member_id, e.first_seq, e.opened_at,
		       coalesce(c.email_seq, 0) AS old_email, coalesce(c.push_seq, 0) AS old_push,
		       e.email_at IS NULL AND e.first_seq > coalesce(c.email_seq, 0)
		           AND (e.opened_at <= $2 OR e.critical_at <= $4) AS email_due,
		       e.push_at IS NULL AND e.first_seq > coalesce(c.push_seq, 0)
		           AND (e.opened_at <= $3 OR e.critical_at <= $5) AS push_due
		FROM escalation_episodes e
		LEFT JOIN escalation_members c ON c.member_id = e.member_id
		WHERE e.opened_at > (SELECT opened_after FROM escalation_floor)
	) d
	WHERE d.email_due OR d.push_due
	ORDER BY d.opened_at LIMIT $6
), per AS MATERIALIZED (
	SELECT member_id, min(old_email) AS old_email, min(old_push) AS old_push,
	       max(first_seq) FILTER (WHERE email_due) AS email_seq, max(first_seq) FILTER (WHERE push_due) AS push_seq
	FROM due GROUP BY member_id
), judged AS MATERIALIZED (
	-- Whether one of the episodes a member's email escalates still has an
	-- unseen message its client may see (checked again when sent): one probe
	-- per member, not per episode.
	SELECT p.*, CASE WHEN p.email_seq IS NOT NULL THEN EXISTS (` + roundUnseenEmail + `) END AS email_unseen
	FROM (
		SELECT per.*, m.client_id,
		       m.preferences ->> 'email' = 'once_per_unread' AND coalesce(m.email, '') <> '' AS wants_email,
		       (m.preferences ->> 'push')::boolean IS NOT FALSE AS wants_push
		FROM per JOIN members m ON m.id = per.member_id
	) p
), live AS MATERIALIZED (
	-- The same for the push, which escalates the same episodes when both
	-- channels are due at once.
	SELECT p.*, coalesce(p.email_unseen AND p.wants_email, false) AS email_live,
	       p.wants_push AND CASE WHEN p.push_seq IS NULL THEN false
	                             WHEN p.push_seq = p.email_seq AND p.old_push = p.old_email THEN p.email_unseen
	                             ELSE EXISTS (` + roundUnseenPush + `) END AS push_live
	FROM judged p
), ids AS MATERIALIZED (
	` + escalationIDs + `
), mail AS MATERIALIZED (
	SELECT (i.prefix || to_hex(i.base + row_number() OVER ()))::uuid AS id, l.*
	FROM live l, ids i
	WHERE l.email_live
), push AS MATERIALIZED (
	SELECT (i.prefix || to_hex(i.base + 2 * $6::bigint + row_number() OVER ()))::uuid AS id, l.*, t.platform, t.push_key
	FROM live l JOIN member_push_targets t ON t.member_id = l.member_id, ids i
	WHERE l.push_live
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
		WHERE x.member_id = g.member_id AND x.seq > g.from_seq AND x.seq <= g.last_seq AND ` + inbox.EpisodeUnseen + `
		  AND (x.sensor_id IS NULL OR EXISTS (SELECT 1 FROM client_sensors l
		                                      WHERE l.client_id = g.client_id AND l.sensor_id = x.sensor_id)))
), digested AS (
	INSERT INTO member_digests (member_id, digest_seq, slot)
	SELECT member_id, last_seq, slot FROM dg
	ON CONFLICT (member_id) DO UPDATE SET digest_seq = excluded.digest_seq, slot = excluded.slot
), deliveries_added AS (
	INSERT INTO deliveries (id, client_id, sensor_id, event_type, channel, target, state, next_attempt_at, event_at)
	SELECT id, client_id, NULL, 'unseen', 'email', 'member:' || member_id, 'PENDING', $1, $1 FROM mail
	UNION ALL
	SELECT id, client_id, NULL, 'unseen', 'swrve', platform || ':' || push_key, 'PENDING', $1, $1 FROM push
	UNION ALL
	SELECT id, client_id, NULL, 'digest', 'email', 'member:' || member_id, 'PENDING', $1, $1 FROM dmail
), emails_added AS (
	INSERT INTO member_emails (delivery_id, event_at, member_id, kind, key, from_seq, to_seq)
	SELECT id, $1, member_id, 'round', NULL, old_email, email_seq FROM mail
	UNION ALL
	SELECT id, $1, member_id, 'push', NULL, old_push, push_seq FROM push
	UNION ALL
	SELECT id, $1, member_id, 'digest', NULL, from_seq, last_seq FROM dmail
), cursors AS (
	INSERT INTO escalation_members AS c (member_id, email_seq, push_seq)
	SELECT member_id, coalesce(email_seq, old_email), coalesce(push_seq, old_push) FROM per
	ON CONFLICT (member_id) DO UPDATE
	SET email_seq = greatest(c.email_seq, excluded.email_seq), push_seq = greatest(c.push_seq, excluded.push_seq)
), floor AS (
	UPDATE escalation_floor
	SET opened_after = least($1::timestamptz, now()) - make_interval(secs => $7::float8)
	WHERE opened_after < least($1::timestamptz, now()) - make_interval(secs => $7::float8)
	  AND (SELECT count(*) FROM due) < $6
)
SELECT (SELECT count(*) FROM due),
       -- Episodes handled: those due, and when the limit cut the round, also
       -- the ones the moved cursors cover beyond them.
       CASE WHEN (SELECT count(*) FROM due) < $6 THEN (SELECT count(*) FROM due) ELSE (
           SELECT count(*) FROM per p JOIN escalation_episodes e ON e.member_id = p.member_id
           WHERE e.first_seq > p.old_email AND e.first_seq <= p.email_seq AND e.email_at IS NULL
              OR e.first_seq > p.old_push AND e.first_seq <= p.push_seq AND e.push_at IS NULL) END,
       (SELECT count(*) FROM mail), (SELECT count(*) FROM push), (SELECT count(*) FROM dmail), (SELECT count(*) FROM dg)`

// roundUnseenEmail and roundUnseenPush are the condition, over a member p
// (of per, with its client_id), that one of the episodes its round's email or
// push escalates (first_seq in (p.old_<channel>, p.<channel>_seq]) still has
// an unseen message about a sensor its client watches, or a free-form one.
const (
	roundUnseenEmail = `SELECT 1 FROM inbox_messages x
		JOIN escalation_episodes e ON e.member_id = x.member_id AND e.key = ` + inbox.EpisodeKey + `
		LEFT JOIN client_sensors l ON l.client_id = p.client_id AND l.sensor_id = x.sensor_id
		WHERE x.member_id = p.member_id AND ` + inbox.EpisodeUnseen + ` AND x.seq > p.old_email
		  AND e.first_seq > p.old_email AND e.first_seq <= p.email_seq AND x.seq >= e.first_seq AND e.email_at IS NULL
		  AND (x.sensor_id IS NULL OR l.sensor_id IS NOT NULL)`
	roundUnseenPush = `SELECT 1 FROM inbox_messages x
		JOIN escalation_episodes e ON e.member_id = x.member_id AND e.key = ` + inbox.EpisodeKey + `
		LEFT JOIN client_sensors l ON l.client_id = p.client_id AND l.sensor_id = x.sensor_id
		WHERE x.member_id = p.member_id AND ` + inbox.EpisodeUnseen + ` AND x.seq > p.old_push
		  AND e.first_seq > p.old_push AND e.first_seq <= p.push_seq AND x.seq >= e.first_seq AND e.push_at IS NULL
		  AND (x.sensor_id IS NULL OR l.sensor_id IS NOT NULL)`
)
