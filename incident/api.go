package incident

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/storage"
)

// Filter selects incidents for a list: a client's (ClientID) or those a
// member hears (MemberID), in a State or any, newest first.
type Filter struct {
	ClientID, MemberID string
	State              string
	Limit              int
}

// incidentColumns are what every read of incidents selects (i = incidents),
// in scanIncident's order.
const incidentColumns = `i.id::text, i.client_id::text, i.subject, coalesce(i.sensor_id, ''), coalesce(i.site, ''), i.state,
	i.severity, i.type, i.event_id, i.opened_at, i.events, i.last_event_at, i.acknowledged_at,
	coalesce(i.acknowledged_by::text, ''), i.resolved_at, coalesce(i.resolved_by::text, ''), coalesce(i.resolved_event, '')`

func scanIncident(row pgx.Row) (domain.Incident, error) {
	var i domain.Incident
	err := row.Scan(&i.ID, &i.ClientID, &i.Subject, &i.SensorID, &i.Site, &i.State, &i.Severity, &i.Type, &i.EventID,
		&i.OpenedAt, &i.Events, &i.LastEventAt, &i.AcknowledgedAt, &i.AcknowledgedBy, &i.ResolvedAt, &i.ResolvedBy,
		&i.ResolvedEvent)
	return i, err
}

// List returns the incidents f selects, newest first. A member's are its
// client's that its routing lets through (memberHears); ErrNotFound when the
// client or member does not exist.
func (p *PostgresStore) List(ctx context.Context, f Filter) ([]domain.Incident, error) {
	if (f.ClientID != "" && uuid.Validate(f.ClientID) != nil) || (f.MemberID != "" && uuid.Validate(f.MemberID) != nil) {
		return nil, fmt.Errorf("listing incidents: %w", storage.ErrNotFound)
	}
	var exists bool
	if err := p.pool.QueryRow(ctx, `SELECT CASE WHEN $1::uuid IS NOT NULL THEN EXISTS (SELECT 1 FROM clients WHERE id = $1)
		ELSE EXISTS (SELECT 1 FROM members WHERE id = $2) END`, nullable(f.ClientID), nullable(f.MemberID)).Scan(&exists); err != nil {
		return nil, fmt.Errorf("listing incidents: %w", err)
	}
	if !exists {
		return nil, fmt.Errorf("listing incidents: %w", storage.ErrNotFound)
	}
	rows, err := p.pool.Query(ctx, `
		SELECT `+incidentColumns+` FROM incidents i
		WHERE ($1::uuid IS NULL OR i.client_id = $1)
		  AND ($2::uuid IS NULL OR EXISTS (
			SELECT 1 FROM members m, LATERAL (SELECT i.client_id, i.sensor_id, i.site, i.severity) inc
			WHERE m.id = $2 AND m.client_id = i.client_id AND `+memberHears+`))
		  AND ($3::text = '' OR i.state = $3)
		ORDER BY i.opened_at DESC, i.id DESC
		LIMIT $4`, nullable(f.ClientID), nullable(f.MemberID), f.State, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("listing incidents: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (domain.Incident, error) { return scanIncident(row) })
	if err != nil {
		return nil, fmt.Errorf("listing incidents: %w", err)
	}
	return out, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Get returns the incident with its timeline; with a memberID, only one of
// the member's client (else ErrNotFound, as for an unknown id).
func (p *PostgresStore) Get(ctx context.Context, id, memberID string) (domain.Incident, error) {
	if uuid.Validate(id) != nil || (memberID != "" && uuid.Validate(memberID) != nil) {
		return domain.Incident{}, fmt.Errorf("reading incident %s: %w", id, storage.ErrNotFound)
	}
	inc, err := scanIncident(p.pool.QueryRow(ctx, `SELECT `+incidentColumns+` FROM incidents i
		WHERE i.id = $1 AND ($2::uuid IS NULL OR EXISTS (SELECT 1 FROM members m WHERE m.id = $2 AND m.client_id = i.client_id))`,
		id, nullable(memberID)))
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Incident{}, fmt.Errorf("reading incident %s: %w", id, storage.ErrNotFound)
	}
	if err != nil {
		return domain.Incident{}, fmt.Errorf("reading incident %s: %w", id, err)
	}
	rows, err := p.pool.Query(ctx, `SELECT at, kind, coalesce(member_id::text, ''), coalesce(channel, ''), detail
		FROM incident_timeline WHERE incident_id = $1 ORDER BY id`, id)
	if err != nil {
		return domain.Incident{}, fmt.Errorf("reading the timeline of incident %s: %w", id, err)
	}
	inc.Timeline, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (domain.IncidentEntry, error) {
		var e domain.IncidentEntry
		err := row.Scan(&e.At, &e.Kind, &e.MemberID, &e.Channel, &e.Detail)
		return e, err
	})
	if err != nil {
		return domain.Incident{}, fmt.Errorf("reading the timeline of incident %s: %w", id, err)
	}
	return inc, nil
}

// Action is what a member does to an incident.
type Action string

// The actions.
const (
	Ack     Action = "ack"
	Resolve Action = "resolve"
)

// Act acknowledges or resolves the incident for the member, on channel (api,
// link, console…), at now, and returns it. Acknowledging stops every reminder
// of it; acknowledging an incident acknowledged or resolved, or resolving a
// resolved one, changes nothing. ErrNotFound when the incident is not one of
// the member's client.
func (p *PostgresStore) Act(ctx context.Context, id, memberID string, action Action, channel string, now time.Time) (domain.Incident, error) {
	if uuid.Validate(id) != nil || uuid.Validate(memberID) != nil {
		return domain.Incident{}, fmt.Errorf("%s of incident %s: %w", action, id, storage.ErrNotFound)
	}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		return act(ctx, tx, id, memberID, action, channel, now)
	})
	if err != nil {
		return domain.Incident{}, fmt.Errorf("%s of incident %s: %w", action, id, storage.MapError(err))
	}
	return p.Get(ctx, id, memberID)
}

// act is Act's one statement, in tx.
func act(ctx context.Context, tx pgx.Tx, id, memberID string, action Action, channel string, now time.Time) error {
	var found bool
	err := tx.QueryRow(ctx, `
		WITH i AS (
			SELECT i.id, i.state FROM incidents i JOIN members m ON m.client_id = i.client_id AND m.id = $2
			WHERE i.id = $1
			FOR UPDATE OF i
		), changed AS (
			UPDATE incidents x
			SET state = CASE WHEN $3 = 'ack' THEN 'acknowledged' ELSE 'resolved' END,
			    acknowledged_at = CASE WHEN $3 = 'ack' THEN $4 ELSE x.acknowledged_at END,
			    acknowledged_by = CASE WHEN $3 = 'ack' THEN $2::uuid ELSE x.acknowledged_by END,
			    resolved_at = CASE WHEN $3 = 'resolve' THEN $4 ELSE x.resolved_at END,
			    resolved_by = CASE WHEN $3 = 'resolve' THEN $2::uuid ELSE x.resolved_by END
			FROM i
			WHERE x.id = i.id AND (($3 = 'ack' AND i.state = 'open') OR ($3 = 'resolve' AND i.state <> 'resolved'))
			RETURNING x.id
		), stopped AS (
			UPDATE incident_tiers SET next_at = NULL
			WHERE incident_id IN (SELECT id FROM changed) AND next_at IS NOT NULL
		), logged AS (
			INSERT INTO incident_timeline (incident_id, at, kind, member_id, channel)
			SELECT id, $4, $3, $2, $5 FROM changed
		), told AS (
			-- The incident event, for the client's feed and webhook.
			INSERT INTO incident_events (incident_id, type, at)
			SELECT id, CASE WHEN $3 = 'ack' THEN 'incident_acknowledged' ELSE 'incident_resolved' END, $4 FROM changed
		)
		SELECT EXISTS (SELECT 1 FROM i)`, id, memberID, string(action), now, channel).Scan(&found)
	if err != nil {
		return err
	}
	if !found {
		return storage.ErrNotFound
	}
	return nil
}

// TokenState is what an ack link's token is.
type TokenState string

// The states of a token.
const (
	TokenValid   TokenState = "valid"
	TokenUsed    TokenState = "used"
	TokenExpired TokenState = "expired"
	TokenUnknown TokenState = "unknown"
)

func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// PeekToken says what the token is, changing nothing (an ack page's GET).
func (p *PostgresStore) PeekToken(ctx context.Context, token string, now time.Time) (TokenState, error) {
	var used *time.Time
	var expires time.Time
	err := p.pool.QueryRow(ctx, `SELECT used_at, expires_at FROM incident_ack_tokens WHERE hash = $1`, tokenHash(token)).
		Scan(&used, &expires)
	return tokenState(err, used, expires, now)
}

func tokenState(err error, used *time.Time, expires, now time.Time) (TokenState, error) {
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return TokenUnknown, nil
	case err != nil:
		return "", fmt.Errorf("reading an ack token: %w", err)
	case used != nil:
		return TokenUsed, nil
	case !now.Before(expires):
		return TokenExpired, nil
	}
	return TokenValid, nil
}

// AckByToken uses the token (once) to acknowledge its incident for its
// member, on channel "link". It returns the token's state before: only a
// valid one acknowledged (or found acknowledged already) the incident.
func (p *PostgresStore) AckByToken(ctx context.Context, token string, now time.Time) (TokenState, domain.Incident, error) {
	var (
		state              TokenState
		incident, memberID string
	)
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var used *time.Time
		var expires time.Time
		err := tx.QueryRow(ctx, `SELECT used_at, expires_at, incident_id::text, member_id::text
			FROM incident_ack_tokens WHERE hash = $1 FOR UPDATE`, tokenHash(token)).Scan(&used, &expires, &incident, &memberID)
		if state, err = tokenState(err, used, expires, now); err != nil || state != TokenValid {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE incident_ack_tokens SET used_at = $2 WHERE hash = $1`, tokenHash(token), now); err != nil {
			return err
		}
		return act(ctx, tx, incident, memberID, Ack, "link", now)
	})
	if err != nil {
		return "", domain.Incident{}, fmt.Errorf("acknowledging by link: %w", storage.MapError(err))
	}
	if state != TokenValid {
		return state, domain.Incident{}, nil
	}
	inc, err := p.Get(ctx, incident, "")
	return state, inc, err
}

// Policy returns the client's escalation policy and whether it set one (the
// default otherwise); ErrNotFound for an unknown client.
func (p *PostgresStore) Policy(ctx context.Context, clientID string) (domain.EscalationPolicy, bool, error) {
	if uuid.Validate(clientID) != nil {
		return domain.EscalationPolicy{}, false, fmt.Errorf("reading a policy: %w", storage.ErrNotFound)
	}
	var raw []byte
	var exists bool
	err := p.pool.QueryRow(ctx, `SELECT true, (SELECT policy FROM incident_policies WHERE client_id = c.id)
		FROM clients c WHERE c.id = $1`, clientID).Scan(&exists, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.EscalationPolicy{}, false, fmt.Errorf("reading the policy of client %s: %w", clientID, storage.ErrNotFound)
	}
	if err != nil {
		return domain.EscalationPolicy{}, false, fmt.Errorf("reading the policy of client %s: %w", clientID, err)
	}
	if raw == nil {
		return domain.DefaultEscalationPolicy(), false, nil
	}
	var pol domain.EscalationPolicy
	if err := json.Unmarshal(raw, &pol); err != nil {
		return domain.EscalationPolicy{}, false, fmt.Errorf("reading the policy of client %s: %w", clientID, err)
	}
	return pol, true, nil
}

// ErrNotMembers is returned by PutPolicy when a tier names an id that is not
// a member of the client; the field errors say which.
var ErrNotMembers = errors.New("a tier names ids that are not members of the client")

// PutPolicy sets the client's policy (checked with Check first by the
// caller); ErrNotFound for an unknown client, and the fields naming ids that
// are not its members with ErrNotMembers. It applies to incidents opened
// after it: an open incident keeps the schedule it opened with.
func (p *PostgresStore) PutPolicy(ctx context.Context, clientID string, pol domain.EscalationPolicy) ([]domain.FieldError, error) {
	if uuid.Validate(clientID) != nil {
		return nil, fmt.Errorf("setting a policy: %w", storage.ErrNotFound)
	}
	raw, err := json.Marshal(pol)
	if err != nil {
		return nil, fmt.Errorf("setting the policy of client %s: %w", clientID, err)
	}
	var ids []string
	for _, t := range pol.Tiers {
		ids = append(ids, t.Members...)
	}
	var bad []domain.FieldError
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var exists bool
		var members []string
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM clients WHERE id = $1),
			coalesce((SELECT array_agg(id::text) FROM members WHERE client_id = $1 AND id = ANY ($2::uuid[])), '{}')`,
			clientID, ids).Scan(&exists, &members); err != nil {
			return err
		}
		if !exists {
			return storage.ErrNotFound
		}
		known := map[string]bool{}
		for _, m := range members {
			known[m] = true
		}
		for i, t := range pol.Tiers {
			for j, m := range t.Members {
				if !known[m] {
					bad = append(bad, domain.FieldError{Field: fmt.Sprintf("tiers[%d].members[%d]", i, j),
						Detail: fmt.Sprintf("%s is not a member of the client", m)})
				}
			}
		}
		if len(bad) > 0 {
			return ErrNotMembers
		}
		_, err := tx.Exec(ctx, `INSERT INTO incident_policies (client_id, policy) VALUES ($1, $2)
			ON CONFLICT (client_id) DO UPDATE SET policy = excluded.policy, updated_at = now()`, clientID, raw)
		return err
	})
	if err != nil {
		return bad, fmt.Errorf("setting the policy of client %s: %w", clientID, storage.MapError(err))
	}
	return nil, nil
}

// DeletePolicy removes the client's policy: the default applies again.
// ErrNotFound for an unknown client.
func (p *PostgresStore) DeletePolicy(ctx context.Context, clientID string) error {
	if uuid.Validate(clientID) != nil {
		return fmt.Errorf("deleting a policy: %w", storage.ErrNotFound)
	}
	var exists bool
	err := p.pool.QueryRow(ctx, `WITH d AS (DELETE FROM incident_policies WHERE client_id = $1)
		SELECT EXISTS (SELECT 1 FROM clients WHERE id = $1)`, clientID).Scan(&exists)
	if err != nil {
		return fmt.Errorf("deleting the policy of client %s: %w", clientID, err)
	}
	if !exists {
		return fmt.Errorf("deleting the policy of client %s: %w", clientID, storage.ErrNotFound)
	}
	return nil
}

// PurgeTokens deletes up to limit ack tokens that expired before before (a
// used or expired link answers 410 until then, 404 after), and returns how
// many it deleted.
func (p *PostgresStore) PurgeTokens(ctx context.Context, before time.Time, limit int) (int, error) {
	tag, err := p.pool.Exec(ctx, `DELETE FROM incident_ack_tokens WHERE hash IN (
		SELECT hash FROM incident_ack_tokens WHERE expires_at < $1 ORDER BY expires_at LIMIT $2)`, before, limit)
	if err != nil {
		return 0, fmt.Errorf("purging expired ack tokens: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// reportIncidentsMax bounds the incidents one report lists.
const reportIncidentsMax = 100

// ClientIncidents returns the client's incidents that were open at some time
// in [from, to) — opened before to and resolved, if at all, after from —
// oldest first, at most reportIncidentsMax (analytics.Incidents: the client's
// report lists them).
func (p *PostgresStore) ClientIncidents(ctx context.Context, clientID string, from, to time.Time) ([]domain.Incident, error) {
	if uuid.Validate(clientID) != nil {
		return nil, nil
	}
	rows, err := p.pool.Query(ctx, `
		SELECT `+incidentColumns+` FROM incidents i
		WHERE i.client_id = $1 AND i.opened_at < $3 AND (i.resolved_at IS NULL OR i.resolved_at > $2)
		ORDER BY i.opened_at, i.id
		LIMIT $4`, clientID, from, to, reportIncidentsMax)
	if err != nil {
		return nil, fmt.Errorf("listing the incidents of client %s for its report: %w", clientID, storage.MapError(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (domain.Incident, error) { return scanIncident(row) })
	if err != nil {
		return nil, fmt.Errorf("listing the incidents of client %s for its report: %w", clientID, storage.MapError(err))
	}
	return out, nil
}
