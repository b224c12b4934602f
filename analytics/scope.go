package analytics

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockstream/lockstream/storage"
)

// The kinds of scope.
const (
	ScopeSensor = "sensor"
	ScopeSite   = "site"
	ScopeClient = "client"
	ScopeFleet  = "fleet"
)

// Scope is what aggregates are about: one sensor, a site's sensors, a
// client's linked sensors, or every registered sensor.
type Scope struct {
	Kind string
	// ID names the sensor, site or client; empty for the fleet.
	ID string
}

// String is the scope as the API writes it: sensor:<id>, site:<site>,
// client:<id> or fleet.
func (s Scope) String() string {
	if s.Kind == ScopeFleet {
		return ScopeFleet
	}
	return s.Kind + ":" + s.ID
}

// The shapes of the ids a scope names (as the registry checks them).
var (
	sensorIDPattern = regexp.MustCompile(`^[A-Za-z0-9]{1,16}$`)
	sitePattern     = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	clientIDPattern = regexp.MustCompile(`^[0-9a-fA-F-]{36}$`)
)

// ParseScope reads sensor:<id>, site:<site>, client:<id> or fleet.
func ParseScope(raw string) (Scope, error) {
	if raw == ScopeFleet {
		return Scope{Kind: ScopeFleet}, nil
	}
	kind, id, ok := strings.Cut(raw, ":")
	var pattern *regexp.Regexp
	switch kind {
	case ScopeSensor:
		pattern = sensorIDPattern
	case ScopeSite:
		pattern = sitePattern
	case ScopeClient:
		pattern = clientIDPattern
	}
	if !ok || pattern == nil {
		return Scope{}, fmt.Errorf("scope must be sensor:<id>, site:<site>, client:<client id> or fleet, got %q", raw)
	}
	if !pattern.MatchString(id) {
		return Scope{}, fmt.Errorf("scope %q: %q is not a %s id", raw, id, kind)
	}
	return Scope{Kind: kind, ID: id}, nil
}

// Scopes resolves a scope to its registered sensors, in id order. An unknown
// sensor, site or client is storage.ErrNotFound.
type Scopes interface {
	ScopeSensors(ctx context.Context, scope Scope) ([]string, error)
}

// PostgresScopes reads scopes from the registry's tables. It is the only
// Postgres this package touches: three reads of sensors and client_sensors.
type PostgresScopes struct {
	pool *pgxpool.Pool
}

// NewPostgresScopes returns a Scopes reading through pool.
func NewPostgresScopes(pool *pgxpool.Pool) *PostgresScopes { return &PostgresScopes{pool: pool} }

// ScopeSensors implements Scopes. A site is known when a sensor names it; a
// client when it is registered (it may have no sensors).
func (p *PostgresScopes) ScopeSensors(ctx context.Context, scope Scope) ([]string, error) {
	var (
		ids []string
		err error
	)
	switch scope.Kind {
	case ScopeSensor:
		err = p.pool.QueryRow(ctx, `SELECT array_agg(id) FROM sensors WHERE id = $1`, scope.ID).Scan(&ids)
		if err == nil && len(ids) == 0 {
			err = storage.ErrNotFound
		}
	case ScopeSite:
		err = p.pool.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM sensors WHERE site = $1`, scope.ID).Scan(&ids)
		if err == nil && len(ids) == 0 {
			err = storage.ErrNotFound
		}
	case ScopeClient:
		var known bool
		err = p.pool.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM clients WHERE id = $1::uuid),
			       coalesce((SELECT array_agg(sensor_id ORDER BY sensor_id) FROM client_sensors WHERE client_id = $1::uuid), '{}')`,
			scope.ID).Scan(&known, &ids)
		if err == nil && !known {
			err = storage.ErrNotFound
		}
	case ScopeFleet:
		err = p.pool.QueryRow(ctx, `SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM sensors`).Scan(&ids)
	default:
		return nil, fmt.Errorf("unknown scope kind %q", scope.Kind)
	}
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return nil, fmt.Errorf("%s: %w", scope, err)
		}
		return nil, fmt.Errorf("reading the sensors of %s: %w", scope, storage.MapError(err))
	}
	return ids, nil
}

// RegisteredSensors implements SensorChecker: which of ids are registered.
func (p *PostgresScopes) RegisteredSensors(ctx context.Context, ids []string) (map[string]bool, error) {
	rows, err := p.pool.Query(ctx, `SELECT id FROM sensors WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("checking ranked sensors: %w", storage.MapError(err))
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("checking ranked sensors: %w", storage.MapError(err))
	}
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// CountSensors implements SensorCounter: how many sensors are registered.
func (p *PostgresScopes) CountSensors(ctx context.Context) (int, error) {
	var n int
	if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM sensors`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting the fleet's sensors: %w", storage.MapError(err))
	}
	return n, nil
}

// ClientSiteOutages implements Outages: the outages of the sites of the
// client's linked sensors that overlap [from, to).
func (p *PostgresScopes) ClientSiteOutages(ctx context.Context, clientID string, from, to time.Time) ([]SiteOutage, error) {
	rows, err := p.pool.Query(ctx, `
		SELECT o.site, o.started_at, o.restored_at, cardinality(o.sensors)
		FROM site_outages o
		WHERE o.site IN (SELECT DISTINCT s.site FROM client_sensors cs JOIN sensors s ON s.id = cs.sensor_id
		                 WHERE cs.client_id = $1::uuid AND s.site IS NOT NULL)
		  AND o.started_at < $3 AND (o.restored_at IS NULL OR o.restored_at > $2)
		ORDER BY o.started_at, o.site`, clientID, from, to)
	if err != nil {
		return nil, fmt.Errorf("reading site outages: %w", storage.MapError(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SiteOutage, error) {
		var o SiteOutage
		err := row.Scan(&o.Site, &o.StartedAt, &o.RestoredAt, &o.Sensors)
		o.StartedAt = o.StartedAt.UTC()
		if o.RestoredAt != nil {
			t := o.RestoredAt.UTC()
			o.RestoredAt = &t
		}
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading site outages: %w", storage.MapError(err))
	}
	return out, nil
}
