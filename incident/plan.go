package incident

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/event"
)

// plan is what an intake batch writes, worked out in memory from the events
// in order and the incidents open before them.
type plan struct {
	opened   []*newIncident
	updates  map[string]*update // existing incidents, by id
	entries  []entry
	tiers    []tierRow
	cursors  map[string]int64
	attached int
	resolved int
}

// newIncident is an incident the batch opened (and may have resolved).
type newIncident struct {
	id, clientID, subject, sensorID, site, severity, typ, eventID string
	seq                                                           int64
	openedAt, lastAt                                              time.Time
	events                                                        int
	resolvedAt                                                    *time.Time
	resolvedEvent                                                 string
	policy                                                        domain.EscalationPolicy
}

// update is what the batch did to an incident open before it.
type update struct {
	events        int
	lastAt        time.Time
	resolvedAt    *time.Time
	resolvedEvent string
}

type entry struct {
	incidentID, kind, detail string
	at                       time.Time
}

type tierRow struct {
	incidentID string
	tier       int
	members    *string // comma-separated ids; nil: every member
	nextAt     time.Time
	repeat     time.Duration
	stopAt     time.Time
}

// apply works out the batch: events in each client's seq order against the
// incidents unresolved before it (open, by subjectKey), which it updates as
// it goes.
func apply(events []feedEvent, open map[string]openIncident, policies map[string]domain.EscalationPolicy) *plan {
	p := &plan{updates: map[string]*update{}, cursors: map[string]int64{}}
	fresh := map[string]*newIncident{} // opened by this batch and unresolved, by subjectKey
	for _, e := range events {
		p.cursors[e.clientID] = e.seq
		if !e.aboutSubject() {
			continue
		}
		key := subjectKey(e.clientID, e.subject())
		severity := event.SeverityOf(e.typ, e.data)
		detail := fmt.Sprintf("%s (event %s, seq %d)", e.typ, e.eventID, e.seq)
		switch n, o := fresh[key], open[key]; {
		case n != nil:
			n.events++
			n.lastAt = e.at
			if e.clears() {
				at := e.at
				n.resolvedAt, n.resolvedEvent = &at, e.eventID
				delete(fresh, key)
				p.entries = append(p.entries, entry{n.id, domain.EntryResolve, detail, e.at})
				p.resolved++
			} else {
				p.entries = append(p.entries, entry{n.id, domain.EntryAttached, detail, e.at})
				p.attached++
			}
		case o.id != "":
			u := p.updates[o.id]
			if u == nil {
				u = &update{}
				p.updates[o.id] = u
			}
			u.events++
			u.lastAt = e.at
			if e.clears() {
				at := e.at
				u.resolvedAt, u.resolvedEvent = &at, e.eventID
				delete(open, key)
				p.entries = append(p.entries, entry{o.id, domain.EntryResolve, detail, e.at})
				p.resolved++
			} else {
				p.entries = append(p.entries, entry{o.id, domain.EntryAttached, detail, e.at})
				p.attached++
			}
		case severity == event.Critical || severity == event.Warning:
			pol, ok := policies[e.clientID]
			if !ok {
				pol = domain.DefaultEscalationPolicy()
			}
			n := &newIncident{id: newID(), clientID: e.clientID, subject: e.subject(), severity: string(severity),
				typ: string(e.typ), eventID: e.eventID, seq: e.seq, openedAt: e.at, lastAt: e.at, events: 1, policy: pol}
			if strings.HasPrefix(n.subject, "site:") {
				n.site = e.site
			} else {
				n.sensorID = e.sensorID
			}
			fresh[key] = n
			p.opened = append(p.opened, n)
			p.entries = append(p.entries, entry{n.id, domain.EntryOpened, detail, e.at})
		}
	}
	for _, n := range p.opened {
		if n.resolvedAt == nil && n.policy.Escalates(n.severity) {
			p.tiers = append(p.tiers, schedule(n.id, n.openedAt, n.policy)...)
		}
	}
	return p
}

// newID is a UUIDv7: incidents' ids rise with their creation.
func newID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// schedule returns the tiers' reminder rows of an incident opened at opened:
// tier i is first reminded After it opened, then every RepeatEvery while not
// after the last tier's Loops-th reminder.
func schedule(incidentID string, opened time.Time, pol domain.EscalationPolicy) []tierRow {
	repeat := time.Duration(pol.RepeatEvery)
	last := pol.Tiers[len(pol.Tiers)-1]
	stop := opened.Add(time.Duration(last.After) + time.Duration(pol.Loops-1)*repeat)
	rows := make([]tierRow, len(pol.Tiers))
	for i, t := range pol.Tiers {
		rows[i] = tierRow{incidentID: incidentID, tier: i + 1, nextAt: opened.Add(time.Duration(t.After)), repeat: repeat,
			stopAt: stop}
		if t.Members != nil {
			m := strings.Join(t.Members, ",")
			rows[i].members = &m
		}
	}
	return rows
}

// write sends the plan's statements in one batch (at most six, whatever the
// number of events).
func (p *plan) write(ctx context.Context, tx pgx.Tx) error {
	b := &pgx.Batch{}
	if len(p.opened) > 0 {
		var (
			ids, clients, subjects, sensors, sites, severities, types, eventIDs, states, resolvedEvents []*string
			seqs                                                                                        []int64
			events                                                                                      []int
			opened, last                                                                                []time.Time
			resolved                                                                                    []*time.Time
		)
		str := func(s string) *string {
			if s == "" {
				return nil
			}
			return &s
		}
		for _, n := range p.opened {
			state := domain.IncidentOpen
			if n.resolvedAt != nil {
				state = domain.IncidentResolved
			}
			ids, clients, subjects = append(ids, &n.id), append(clients, &n.clientID), append(subjects, &n.subject)
			sensors, sites = append(sensors, str(n.sensorID)), append(sites, str(n.site))
			severities, types, eventIDs = append(severities, &n.severity), append(types, &n.typ), append(eventIDs, &n.eventID)
			states, resolvedEvents = append(states, &state), append(resolvedEvents, str(n.resolvedEvent))
			seqs, events = append(seqs, n.seq), append(events, n.events)
			opened, last, resolved = append(opened, n.openedAt), append(last, n.lastAt), append(resolved, n.resolvedAt)
		}
		b.Queue(`
			INSERT INTO incidents (id, client_id, subject, sensor_id, site, severity, type, event_id, state, resolved_event,
			                       opened_seq, events, opened_at, last_event_at, resolved_at)
			SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
			                     $8::text[], $9::text[], $10::text[], $11::bigint[], $12::int[], $13::timestamptz[],
			                     $14::timestamptz[], $15::timestamptz[])`,
			ids, clients, subjects, sensors, sites, severities, types, eventIDs, states, resolvedEvents, seqs, events,
			opened, last, resolved)
	}
	if len(p.updates) > 0 {
		var (
			ids            []string
			events         []int
			last           []time.Time
			resolved       []*time.Time
			resolvedEvents []string
			stopped        []string
		)
		for id, u := range p.updates {
			ids, events, last = append(ids, id), append(events, u.events), append(last, u.lastAt)
			resolved, resolvedEvents = append(resolved, u.resolvedAt), append(resolvedEvents, u.resolvedEvent)
			if u.resolvedAt != nil {
				stopped = append(stopped, id)
			}
		}
		b.Queue(`
			UPDATE incidents i SET events = i.events + u.n, last_event_at = greatest(i.last_event_at, u.last_at),
			       state = CASE WHEN u.resolved_at IS NOT NULL THEN 'resolved' ELSE i.state END,
			       resolved_at = coalesce(u.resolved_at, i.resolved_at),
			       resolved_event = CASE WHEN u.resolved_at IS NOT NULL THEN u.resolved_event ELSE i.resolved_event END
			FROM unnest($1::uuid[], $2::int[], $3::timestamptz[], $4::timestamptz[], $5::text[])
				AS u (id, n, last_at, resolved_at, resolved_event)
			WHERE i.id = u.id`, ids, events, last, resolved, resolvedEvents)
		if len(stopped) > 0 {
			b.Queue(`UPDATE incident_tiers SET next_at = NULL WHERE incident_id = ANY($1::uuid[]) AND next_at IS NOT NULL`, stopped)
		}
	}
	if len(p.tiers) > 0 {
		// Each tier's since is the reminder cursor, read FOR SHARE: no round
		// commits before this transaction does, so the first mark after it
		// covers every due time of the tier up to its end (reminders.go).
		var (
			ids     []string
			tiers   []int
			members []*string
			next    []time.Time
			repeats []time.Duration
			stopAt  []time.Time
		)
		for _, t := range p.tiers {
			ids, tiers, members = append(ids, t.incidentID), append(tiers, t.tier), append(members, t.members)
			next, repeats, stopAt = append(next, t.nextAt), append(repeats, t.repeat), append(stopAt, t.stopAt)
		}
		b.Queue(`
			INSERT INTO incident_tiers (incident_id, tier, members, next_at, repeat_every, stop_at, since)
			SELECT id, tier, string_to_array(members, ',')::uuid[], next_at, repeat_every, stop_at, c.to_at
			FROM unnest($1::uuid[], $2::int[], $3::text[], $4::timestamptz[], $5::interval[], $6::timestamptz[])
				AS x (id, tier, members, next_at, repeat_every, stop_at),
			     (SELECT to_at FROM incident_reminder_cursor FOR SHARE) c`, ids, tiers, members, next, repeats, stopAt)
	}
	if len(p.entries) > 0 {
		var ids, kinds, details []string
		var at []time.Time
		for _, e := range p.entries {
			ids, kinds, details, at = append(ids, e.incidentID), append(kinds, e.kind), append(details, e.detail), append(at, e.at)
		}
		b.Queue(`
			INSERT INTO incident_timeline (incident_id, at, kind, detail)
			SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::text[])`, ids, at, kinds, details)
	}
	p.queueEvents(b)
	var clients []string
	var seqs []int64
	for c, s := range p.cursors {
		clients, seqs = append(clients, c), append(seqs, s)
	}
	b.Queue(`
		INSERT INTO incident_cursors AS k (client_id, last_seq)
		SELECT * FROM unnest($1::uuid[], $2::bigint[]) ORDER BY 1
		ON CONFLICT (client_id) DO UPDATE SET last_seq = greatest(k.last_seq, excluded.last_seq)`, clients, seqs)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("writing the incidents: %w", err)
	}
	return nil
}

// queueEvents queues the insert of the batch's incident events (opened, then
// resolved), which PublishIncidentEvents puts on the clients' feeds and
// webhooks.
func (p *plan) queueEvents(b *pgx.Batch) {
	var ids, types []string
	var at []time.Time
	for _, n := range p.opened {
		ids, types, at = append(ids, n.id), append(types, string(event.IncidentOpened)), append(at, n.openedAt)
		if n.resolvedAt != nil {
			ids, types, at = append(ids, n.id), append(types, string(event.IncidentResolved)), append(at, *n.resolvedAt)
		}
	}
	for id, u := range p.updates {
		if u.resolvedAt != nil {
			ids, types, at = append(ids, id), append(types, string(event.IncidentResolved)), append(at, *u.resolvedAt)
		}
	}
	if len(ids) == 0 {
		return
	}
	b.Queue(`
		INSERT INTO incident_events (incident_id, type, at)
		SELECT id, type, at FROM unnest($1::uuid[], $2::text[], $3::timestamptz[]) WITH ORDINALITY AS x (id, type, at, ord)
		ORDER BY ord`, ids, types, at)
}
