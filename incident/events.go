package incident

import (
	"context"
	"fmt"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/storage"
)

// Published says what PublishEvents did.
type Published struct {
	// Events is the number of incident events taken (and marked published);
	// Notifications those that went onto a feed (their client subscribes to
	// the type), each with one webhook delivery.
	Events, Notifications int
}

// PublishEvents puts up to limit unpublished incident events (incident_opened,
// incident_acknowledged, incident_resolved, written by intake and by Act in
// the transactions that change the incident), oldest first, onto their
// clients' feeds and to their webhooks, in one statement (publishEventsSQL)
// that holds the events (FOR UPDATE SKIP LOCKED) and marks them published:
// concurrent callers publish each once, and a crash publishes none twice.
// Like the operational notices (storage.PublishEndpointNotices), they take
// the client's next seqs; unlike them they go by webhook, to a client that
// subscribed to them by name (not by email or push: the members hear of
// incidents by their reminders).
func (p *PostgresStore) PublishEvents(ctx context.Context, limit int) (Published, error) {
	var res Published
	var woke int
	err := p.pool.QueryRow(ctx, publishEventsSQL, limit, string(event.IncidentOpened)).
		Scan(&res.Events, &res.Notifications, &woke)
	if err != nil {
		return Published{}, fmt.Errorf("publishing incident events: %w", storage.MapError(err))
	}
	return res, nil
}

// publishEventsSQL is PublishEvents' statement: $1 the limit, $2
// 'incident_opened'.
//
// Only a client that names the type in its event_types hears of it: NULL
// (every type) means every sensor event type, so a receiver that takes
// everything gets no new shape unasked. The events of subscribed clients
// become notifications (event id
// event.IncidentEventID's form; the incident's sensor, or for a site incident
// the first of the client's sensors of the site, with the site; data 0 on the
// opening of a critical incident, which event.SeverityOf grades critical)
// numbered with the client's next seqs (client_event_seq moved on under its
// row lock, clients in id order, as the fan-out does), each with one webhook
// delivery (PAUSED while the endpoint is disabled); the retriers are woken.
const publishEventsSQL = `
WITH e AS MATERIALIZED (
	SELECT e.id, e.incident_id, e.type, e.at FROM incident_events e
	WHERE e.published_at IS NULL
	ORDER BY e.id LIMIT $1
	FOR UPDATE OF e SKIP LOCKED
), marked AS (
	UPDATE incident_events x SET published_at = now() FROM e WHERE x.id = e.id
), sub AS MATERIALIZED (
	SELECT e.*, i.client_id, i.severity, nullif(i.site, '') AS site, c.endpoint_disabled_at IS NOT NULL AS paused,
	       coalesce(nullif(i.sensor_id, ''), (
	           SELECT min(l.sensor_id) FROM client_sensors l JOIN sensors s ON s.id = l.sensor_id
	           WHERE l.client_id = i.client_id AND s.site = i.site), '') AS sensor_id,
	       'incident:' || e.incident_id || ':' || substr(e.type, length('incident_') + 1) AS event_id,
	       row_number() OVER (PARTITION BY i.client_id ORDER BY e.id) AS ord
	FROM e JOIN incidents i ON i.id = e.incident_id JOIN clients c ON c.id = i.client_id
	WHERE e.type = ANY (c.event_types)
), cl AS (
	SELECT client_id, count(*) AS n FROM sub GROUP BY client_id
), bumped AS (
	INSERT INTO client_event_seq AS q (client_id, last_seq)
	SELECT client_id, n FROM cl ORDER BY client_id
	ON CONFLICT (client_id) DO UPDATE SET last_seq = q.last_seq + excluded.last_seq
	RETURNING q.client_id, q.last_seq
), n AS (
	INSERT INTO notifications (id, event_id, client_id, sensor_id, type, data, event_at, site, client_seq)
	SELECT lockstream_notification_id(s.event_id, s.client_id, s.at), s.event_id, s.client_id, s.sensor_id, s.type, CASE WHEN s.type = $2 AND s.severity = 'critical' THEN 0 END, s.at, s.site,
	       b.last_seq - cl.n + s.ord
	FROM sub s JOIN bumped b ON b.client_id = s.client_id JOIN cl ON cl.client_id = s.client_id
	RETURNING id, event_id, client_id, sensor_id, type, event_at
), d AS (
	INSERT INTO deliveries (id, notification_id, client_id, sensor_id, event_type, channel, target, state,
	                        next_attempt_at, event_at)
	SELECT lockstream_uuid_v7(), n.id, n.client_id, n.sensor_id, n.type, 'webhook', '',
	       CASE WHEN s.paused THEN 'PAUSED' ELSE 'PENDING' END, now(), n.event_at
	FROM n JOIN sub s ON s.event_id = n.event_id AND s.client_id = n.client_id
	RETURNING 1
)
SELECT (SELECT count(*) FROM e), (SELECT count(*) FROM n),
       (SELECT count(pg_notify('` + storage.OutboxChannel + `', 'webhook')) FROM (SELECT 1 FROM d LIMIT 1) x)`
