package escalation

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockstream/lockstream/storage"
)

// PostgresStore runs escalation rounds: the round's rules are its one
// statement (escalationRoundSQL). The episodes it reads are kept by the inbox's
// writes (storage), whose rules of an episode's key and of an unseen message it
// shares (storage.InboxEpisodeKey, storage.InboxEpisodeUnseen); what an
// email lists and a push says is read when sent (storage.MemberEmails,
// PushRequests).
type PostgresStore struct {
	pool *pgxpool.Pool
}

// NewPostgresStore returns the rounds' store over p's pool.
func NewPostgresStore(p *storage.Postgres) *PostgresStore {
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

// RunRound runs one escalation round in one transaction of a fixed
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
func (p *PostgresStore) RunRound(ctx context.Context, r Round) (Result, error) {
	if r.Limit <= 0 {
		return Result{}, fmt.Errorf("escalation round: limit %d must be positive", r.Limit)
	}
	res := Result{Statements: 2} // BEGIN, COMMIT
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
			r.Now.Add(-r.PushAfter/4), r.Limit, storage.UnseenPushPrototype,
		).Scan(&res.Episodes, &res.Emails, &res.Pushes, &res.Digests, &res.DigestMembers)
	})
	if err != nil {
		return Result{}, fmt.Errorf("running an escalation round: %w", storage.MapError(err))
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
	               WHERE x.member_id = e.member_id AND ` + storage.InboxEpisodeKey + ` = e.key AND x.seq >= e.first_seq
	                 AND ` + storage.InboxEpisodeUnseen + `) AS unseen,
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
		WHERE x.member_id = g.member_id AND x.seq > g.from_seq AND x.seq <= g.last_seq AND ` + storage.InboxEpisodeUnseen + `
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
