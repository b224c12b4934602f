package inbox

import "github.com/lockstream/lockstream/domain"

// The escalation episodes are opened by the inbox write (EpisodeWrite), so
// their rules over inbox_messages live here; the escalation package runs the
// rounds that read them.

// EpisodeKey is the escalation-episode key of a message, as SQL over
// inbox_messages aliased x: its sensor, or '#' and its type for a free-form
// notification ('#' is in no sensor id). It must read as in the index
// inbox_messages_episode_idx. episodeKeyI is the same over alias i.
const (
	EpisodeKey  = `coalesce(x.sensor_id, '#' || x.type)`
	episodeKeyI = `coalesce(i.sensor_id, '#' || i.type)`
)

// EpisodeUnseen is the condition on inbox_messages x that a message counts for
// an episode: unseen, not deleted, not marked unseen by the member itself.
const EpisodeUnseen = `x.seen_at IS NULL AND x.deleted_at IS NULL AND NOT x.self_unseen`

// EpisodeWrite follows the inbox write's ins (Write: the messages
// inserted) and, in the same statement, opens or joins the escalation episode of each member and key of
// the new messages (docs/DESIGN.md "Escalation of unseen messages"): a key
// whose last episode still has an unseen message joins it (a critical message
// sets critical_at once); otherwise a new episode starts at the first new
// message, unhandled. Joining an open episode writes nothing, unless a
// critical message is the first of it. The episodes' members are locked by
// the inbox write, so no other inbox write races this one — but for a writer
// that committed while this statement waited for that lock, whose messages and
// episode its snapshot does not see: should both write the same key (two
// free-form notifications of one type at once; one sensor's events are
// written by one fan-out worker in order), the later one restarts the
// episode at its own message. An escalation round marks an episode handled
// only while its first_seq is the one it judged. An incident reminder opens
// no episode (domain.IncidentReminder: it brings its own email and push).
const EpisodeWrite = `, g AS (
	SELECT i.member_id, ` + episodeKeyI + ` AS key, (min(i.client_id::text))::uuid AS client_id,
	       min(i.sensor_id) AS sensor_id, min(i.type) AS type, min(i.seq) AS first_seq,
	       bool_or(i.severity = 'critical') AS critical
	FROM ins i WHERE i.type <> '` + domain.IncidentReminder + `' GROUP BY 1, 2
), episodes AS (
	INSERT INTO escalation_episodes AS e (member_id, key, client_id, sensor_id, type, first_seq, opened_at, critical_at)
	SELECT g.member_id, g.key, g.client_id, g.sensor_id, g.type,
	       CASE WHEN o.open THEN o.first_seq ELSE g.first_seq END,
	       CASE WHEN o.open THEN o.opened_at ELSE now() END,
	       CASE WHEN o.open AND o.critical_at IS NOT NULL THEN o.critical_at WHEN g.critical THEN now() END
	FROM g LEFT JOIN LATERAL (
		SELECT p.first_seq, p.opened_at, p.critical_at, EXISTS (
			SELECT 1 FROM inbox_messages x
			WHERE x.member_id = p.member_id AND ` + EpisodeKey + ` = p.key AND x.seq >= p.first_seq
			  AND ` + EpisodeUnseen + `) AS open
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

// PushRequests selects, for storage's PushRequests (after its UNION ALL), (delivery id, then pushColumns' order) the
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
const PushRequests = `
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
		              WHERE x.member_id = e.member_id AND ` + EpisodeKey + ` = e.key AND x.seq >= e.first_seq
		                AND ` + EpisodeUnseen + `)
	) r ON true
	WHERE d.id = ANY ($1::uuid[]) AND d.channel = 'swrve' AND d.notification_id IS NULL
	  AND d.event_type = 'unseen' AND (d.sensor_id IS NOT NULL OR me.delivery_id IS NOT NULL)
	  AND NOT EXISTS (SELECT 1 FROM pushes p WHERE p.delivery_id = d.id)`
