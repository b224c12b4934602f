package incident

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/storage"
)

// PostgresStore holds the incidents, their tiers, timelines, policies, ack
// tokens and the intake's cursors; its SQL is the box's.
type PostgresStore struct {
	pool *pgxpool.Pool
}

// NewPostgresStore returns the incidents' store over p's pool.
func NewPostgresStore(p *storage.Postgres) *PostgresStore {
	return &PostgresStore{pool: p.Pool()}
}

// IntakeResult says what an intake batch did.
type IntakeResult struct {
	// Ran is false when another process held the intake lock.
	Ran bool
	// Events is the number of feed events read; Full reports that it reached
	// the batch, so more may wait.
	Events int
	Full   bool
	// Opened, Attached and Resolved count what the events did to incidents.
	Opened, Attached, Resolved int
}

// intakeLock is the advisory lock key of an intake batch: one at a time over
// the database, so that two processes never read the same events.
const intakeLock = 0x6c6b_7374_696e_6331 // "lkstinc1"

// feedEvent is one event of a client's feed.
type feedEvent struct {
	clientID, eventID, sensorID, site string
	typ                               event.Type
	seq                               int64
	data                              *int
	at                                time.Time
}

// subject is what an event is about: its site for a site event, else its
// sensor.
func (e feedEvent) subject() string {
	if e.site != "" && (e.typ == event.SiteOutage || e.typ == event.SiteRestored) {
		return "site:" + e.site
	}
	return "sensor:" + e.sensorID
}

// aboutSubject reports whether e is about a sensor or a site: operational
// notices (endpoint_failing…) are the client's, not a subject's, and the
// incident events are the incidents' own: neither opens an incident.
func (e feedEvent) aboutSubject() bool {
	return !slices.Contains(event.Notices(), e.typ) && !slices.Contains(event.Incidents(), e.typ) &&
		(e.sensorID != "" || e.site != "")
}

// clears reports whether e ends its subject's problem: the sensor is back,
// locked or stable again, the site restored.
func (e feedEvent) clears() bool {
	switch e.typ {
	case event.ConnectionRestored, event.SensorStable, event.SiteRestored:
		return true
	case event.StateChanged:
		return e.data != nil && *e.data != event.Unlocked
	}
	return false
}

// Intake reads up to batch events of the clients' feeds after their cursors,
// in each client's seq order, and applies them in one transaction under the
// intake lock: a critical or warning event opens an incident of its subject
// unless one is unresolved (it attaches), a later event attaches, a clearing
// event resolves it; the cursors move with the effects, so a crash repeats or
// loses nothing. A fixed number of statements per batch.
func (p *PostgresStore) Intake(ctx context.Context, batch int) (IntakeResult, error) {
	var res IntakeResult
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, int64(intakeLock)).Scan(&res.Ran); err != nil {
			return err
		}
		if !res.Ran {
			return nil
		}
		events, err := readFeed(ctx, tx, batch)
		if err != nil {
			return err
		}
		res.Events, res.Full = len(events), len(events) >= batch
		if len(events) == 0 {
			return nil
		}
		open, err := unresolved(ctx, tx, events)
		if err != nil {
			return err
		}
		policies, err := readPolicies(ctx, tx, events)
		if err != nil {
			return err
		}
		plan := apply(events, open, policies)
		res.Opened, res.Attached, res.Resolved = len(plan.opened), plan.attached, plan.resolved
		return plan.write(ctx, tx)
	})
	if err != nil {
		return IntakeResult{}, fmt.Errorf("incident intake: %w", storage.MapError(err))
	}
	return res, nil
}

// readFeed returns up to batch events after the clients' cursors, ordered by
// client and seq, so each client's are a prefix of what it has after its
// cursor. Seqs commit in order (storage's client_event_seq), so a cursor never
// passes a seq still uncommitted.
func readFeed(ctx context.Context, tx pgx.Tx, batch int) ([]feedEvent, error) {
	rows, err := tx.Query(ctx, `
		SELECT c.client_id::text, n.client_seq, n.event_id, n.type, coalesce(n.sensor_id, ''), n.data, n.event_at, coalesce(n.site, '')
		FROM (
			SELECT q.client_id, coalesce(k.last_seq, 0) AS done
			FROM client_event_seq q
			JOIN clients cl ON cl.id = q.client_id
			LEFT JOIN incident_cursors k ON k.client_id = q.client_id
			WHERE q.last_seq > coalesce(k.last_seq, 0)
			ORDER BY q.client_id LIMIT $1
		) c
		CROSS JOIN LATERAL (
			SELECT * FROM notifications n
			WHERE n.client_id = c.client_id AND n.client_seq > c.done
			ORDER BY n.client_seq LIMIT $1
		) n
		ORDER BY c.client_id, n.client_seq
		LIMIT $1`, batch)
	if err != nil {
		return nil, fmt.Errorf("reading the feeds: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (feedEvent, error) {
		var (
			e    feedEvent
			typ  string
			data *int16
		)
		err := row.Scan(&e.clientID, &e.seq, &e.eventID, &typ, &e.sensorID, &data, &e.at, &e.site)
		e.typ = event.Type(typ)
		if data != nil {
			d := int(*data)
			e.data = &d
		}
		return e, err
	})
}

// openIncident is an unresolved incident of the batch's subjects.
type openIncident struct {
	id, state string
}

func subjectKey(clientID, subject string) string { return clientID + " " + subject }

// unresolved returns the unresolved incidents of the batch's subjects, by
// subjectKey.
func unresolved(ctx context.Context, tx pgx.Tx, events []feedEvent) (map[string]openIncident, error) {
	clients, subjects := make([]string, len(events)), make([]string, len(events))
	for i, e := range events {
		clients[i], subjects[i] = e.clientID, e.subject()
	}
	rows, err := tx.Query(ctx, `
		SELECT i.client_id::text, i.subject, i.id::text, i.state FROM incidents i
		WHERE i.state <> 'resolved'
		  AND (i.client_id, i.subject) IN (SELECT DISTINCT * FROM unnest($1::uuid[], $2::text[]))`, clients, subjects)
	if err != nil {
		return nil, fmt.Errorf("reading the open incidents: %w", err)
	}
	out := map[string]openIncident{}
	var client, subject string
	var o openIncident
	_, err = pgx.ForEachRow(rows, []any{&client, &subject, &o.id, &o.state}, func() error {
		out[subjectKey(client, subject)] = o
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the open incidents: %w", err)
	}
	return out, nil
}

// readPolicies returns the escalation policies of the batch's clients; a
// client without one is absent (the default applies).
func readPolicies(ctx context.Context, tx pgx.Tx, events []feedEvent) (map[string]domain.EscalationPolicy, error) {
	clients := make([]string, len(events))
	for i, e := range events {
		clients[i] = e.clientID
	}
	rows, err := tx.Query(ctx, `SELECT client_id::text, policy FROM incident_policies WHERE client_id = ANY($1::uuid[])`, clients)
	if err != nil {
		return nil, fmt.Errorf("reading the policies: %w", err)
	}
	out := map[string]domain.EscalationPolicy{}
	var client string
	var raw []byte
	_, err = pgx.ForEachRow(rows, []any{&client, &raw}, func() error {
		var pol domain.EscalationPolicy
		if err := json.Unmarshal(raw, &pol); err != nil {
			return fmt.Errorf("the policy of client %s: %w", client, err)
		}
		out[client] = pol
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the policies: %w", err)
	}
	return out, nil
}
