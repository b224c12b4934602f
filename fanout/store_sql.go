package fanout

// time, $6 the superseded deliveries' last_error.
const supersedeSQL = `
	UPDATE deliveries d
	SET state = 'SUPERSEDED', last_error = $6, updated_at = now()
	FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::timestamptz[])
		AS k (client_id, sensor_id, channel, target, newest)
	WHERE d.client_id = k.client_id AND d.sensor_id = k.sensor_id
	  AND d.channel = k.channel AND d.target = k.target
	  AND d.state IN ('SCHEDULED', 'PENDING', 'RETRY')
	  AND d.event_type = 'state_changed' AND d.event_at < k.newest
	RETURNING d.channel`

// createNotificationsSQL is the fan-out's outbox insert: $1-$9 the events
// (id, type, sensor, data, previous, time, audience, site, lost_since), $10
// the most deliveries to create claimed, $11 their lease's end and $12
// whether emails may be among them (see Claim). It returns a row
// per new delivery, each with the counts of new notifications and of those
// not made for want of a subscription, or one row of counts alone.
const createNotificationsSQL = `
			WITH ev AS (
				SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int2[], $5::int2[], $6::timestamptz[],
				                     $7::text[], $8::text[], $9::timestamptz[])
					WITH ORDINALITY AS e (event_id, type, sensor_id, data, previous, at, audience, site, lost_since, ord)
			), linked AS (
				-- Subscriptions: a client is told only of the types it chose (NULL: all).
				-- The clients of the event's sensor; of a site event's sensors and of
				-- every sensor of its site, once each.
				SELECT ev.*, cs.client_id, c.event_types IS NULL OR ev.type = ANY (c.event_types) AS subscribed,
				       lockstream_notification_id(ev.event_id, cs.client_id, ev.at) AS notification_id
				FROM ev JOIN LATERAL (
					SELECT l.client_id FROM client_sensors l
					WHERE l.sensor_id = ANY (string_to_array(ev.audience, ','))
					UNION
					SELECT l.client_id FROM sensors s JOIN client_sensors l ON l.sensor_id = s.id
					WHERE s.site = ev.site
				) cs ON true
				JOIN clients c ON c.id = cs.client_id
			), fresh AS (
				-- The (event, client) pairs not notified before: a replay adds
				-- nothing. A notification's id is made from that pair and the
				-- event's time (lockstream_notification_id, migration 00246), so
				-- the check probes the primary key, and a replay committed by
				-- another writer after this statement began fails the insert on
				-- it instead, and the batch is written again (Fanout.write), so no
				-- seq is taken for it.
				SELECT l.* FROM linked l
				WHERE l.subscribed AND NOT EXISTS (
					SELECT 1 FROM notifications x WHERE x.id = l.notification_id AND x.event_at = l.at)
			), locked AS (
				-- The clients before their seq counters, in id order, as DeleteClient
				-- takes them (storage.QueueClientLocks).
				SELECT c.id FROM clients c WHERE c.id IN (SELECT client_id FROM fresh) ORDER BY c.id FOR KEY SHARE
			), counted AS (
				SELECT client_id, count(*) AS n FROM fresh GROUP BY client_id
			), bumped AS (
				-- Each client's next seqs, in the insert itself, so a notification is
				-- written once (an UPDATE of its seq moved every index entry). The
				-- counter's row lock is held to commit: seqs commit in order, none
				-- skipped or taken twice (storage.QueueClientSeqs).
				INSERT INTO client_event_seq AS q (client_id, last_seq)
				SELECT client_id, n FROM counted WHERE client_id IN (SELECT id FROM locked) ORDER BY client_id
				ON CONFLICT (client_id) DO UPDATE SET last_seq = q.last_seq + excluded.last_seq
				RETURNING q.client_id, q.last_seq
			), n AS (
				INSERT INTO notifications (id, event_id, client_id, sensor_id, type, data, previous, event_at, lost_since,
				                           client_seq)
				SELECT f.notification_id, f.event_id, f.client_id, f.sensor_id, f.type, f.data, f.previous, f.at,
				       f.lost_since,
				       b.last_seq - k.n + row_number() OVER (PARTITION BY f.client_id ORDER BY f.ord)
				FROM fresh f JOIN bumped b ON b.client_id = f.client_id JOIN counted k ON k.client_id = f.client_id
				RETURNING id, event_id, client_id, sensor_id, type, event_at, client_seq
			), dd AS (
				SELECT n.id AS notification_id, n.event_id, n.client_id, n.sensor_id, n.type, ch.channel, ch.target,
				       n.event_at, n.client_seq, ev.ord,
				       -- A disabled endpoint's deliveries are kept, not attempted.
				       ch.channel = 'webhook' AND c.endpoint_disabled_at IS NOT NULL AS paused,
				       -- A webhook, or an email, the sender in this process may take at
				       -- once (Claim): the only one of its key in the batch, with no
				       -- open older one (the claim's order check, lockstream_due_deliveries).
				       (ch.channel = 'webhook' AND c.endpoint_disabled_at IS NULL OR ch.channel = 'email' AND coalesce($12::bool, false))
				       AND $10::int > 0
				       AND count(*) OVER (PARTITION BY n.client_id, n.sensor_id, ch.channel, ch.target) = 1
				       AND NOT EXISTS (
				           SELECT 1 FROM deliveries o
				           WHERE o.client_id = n.client_id AND o.sensor_id = n.sensor_id
				             AND o.channel = ch.channel AND o.target = ch.target
				             AND o.state IN ('PENDING', 'RETRY', 'IN_FLIGHT') AND o.event_at <= n.event_at)
				       -- nor, for a webhook, one of its key handed over and still in flight.
				       AND (ch.channel <> 'webhook' OR NOT EXISTS (
				           SELECT 1 FROM webhooks_in_flight h
				           WHERE h.client_id = n.client_id AND h.sensor_id = n.sensor_id)) AS claimable
				FROM n JOIN ev ON ev.event_id = n.event_id JOIN clients c ON c.id = n.client_id
				CROSS JOIN LATERAL (
					SELECT 'webhook'::text, ''::text
					UNION ALL SELECT 'email', '' WHERE c.email IS NOT NULL
					UNION ALL SELECT 'swrve', t.platform || ':' || t.push_key FROM push_targets t WHERE t.client_id = c.id
				) AS ch (channel, target)
			), dc AS (
				-- The first $10 claimable ones, in event order, are claimed. Each
				-- delivery's id is drawn here (in event order), so what was created is
				-- read from dc, not by joining the inserts' RETURNING to n: the
				-- planner guesses a CTE's rows, and a guess of one for h made that
				-- join a nested loop, quadratic in the batch (112 ms for 1,000).
				SELECT dd.*, claimable AND count(*) FILTER (WHERE claimable)
				           OVER (ORDER BY ord ROWS UNBOUNDED PRECEDING) <= $10 AS claimed,
				       lockstream_uuid_v7() AS id
				FROM dd
			), d AS (
				-- A claimed email is a row IN_FLIGHT on its first attempt, as a claim
				-- leaves one; a claimed webhook has no row (h).
				INSERT INTO deliveries (id, notification_id, client_id, sensor_id, event_type, channel, target,
				                        state, next_attempt_at, event_at, attempts, leased_until)
				SELECT dc.id, dc.notification_id, dc.client_id, dc.sensor_id, dc.type, dc.channel,
				       dc.target, CASE WHEN dc.claimed THEN 'IN_FLIGHT' WHEN dc.paused THEN 'PAUSED' ELSE 'PENDING' END,
				       now(), dc.event_at, CASE WHEN dc.claimed THEN 1 ELSE 0 END,
				       CASE WHEN dc.claimed THEN $11::timestamptz END
				FROM dc WHERE NOT (dc.claimed AND dc.channel = 'webhook')
				-- Inserted in the events' order, so seq (the column default) follows it.
				-- No conflict is possible: n holds only the notifications just
				-- inserted (migration 00141).
				ORDER BY dc.ord
			), h AS (
				-- A claimed webhook gets no delivery row: the row of its attempt in
				-- flight, leased as a claim leases it (migration 00240).
				INSERT INTO webhooks_in_flight (id, notification_id, client_id, sensor_id, event_id, event_type,
				                                event_at, leased_until)
				SELECT dc.id, dc.notification_id, dc.client_id, dc.sensor_id, dc.event_id, dc.type,
				       dc.event_at, $11::timestamptz
				FROM dc WHERE dc.claimed AND dc.channel = 'webhook'
			)
			SELECT (SELECT count(*) FROM n), (SELECT count(*) FROM linked WHERE NOT subscribed),
			       r.client_id, coalesce(r.sensor_id, ''), coalesce(r.event_type, ''), coalesce(r.channel, ''),
			       coalesce(r.target, ''), coalesce(r.event_at, 'epoch'), coalesce(r.notification_id, ''),
			       coalesce(r.event_id, ''), coalesce(r.id, ''), coalesce(r.state, ''), coalesce(r.client_seq, 0)
			-- One row at least, so the filtered count arrives when nothing was created.
			-- Every row of dc is inserted, by d or by h (each runs to completion
			-- whether read or not), in the state given here.
			FROM (SELECT 1) AS one LEFT JOIN (
				SELECT dc.client_id::text, dc.sensor_id, dc.type AS event_type, dc.channel, dc.target, dc.event_at,
				       dc.notification_id::text, dc.event_id, dc.id::text,
				       CASE WHEN dc.claimed THEN 'IN_FLIGHT' WHEN dc.paused THEN 'PAUSED' ELSE 'PENDING' END AS state,
				       dc.client_seq
				FROM dc) AS r ON true`
