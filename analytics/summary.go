package analytics

import (
	"context"
	"fmt"
	"time"
)

// SummaryQuery asks for a scope's figures over [From, To) in buckets aligned
// in Location. ClickHouse keeps seconds: From and To are truncated to the
// second.
type SummaryQuery struct {
	Scope    Scope
	From, To time.Time
	Bucket   Bucket
	Location *time.Location
}

// Summary is the answer to a SummaryQuery.
type Summary struct {
	Scope    Scope
	From, To time.Time
	Bucket   Bucket
	Location *time.Location
	// Sensors is how many sensors the scope has now.
	Sensors int
	Buckets []Figures
	Total   Figures
}

// Summary computes the figures of q. An unknown sensor, site or client is
// storage.ErrNotFound; a range that makes too many buckets an error wrapping
// ErrBadQuery.
func (s *Store) Summary(ctx context.Context, q SummaryQuery) (Summary, error) {
	from, to := q.From.Truncate(time.Second), q.To.Truncate(time.Second)
	if !from.Before(to) {
		return Summary{}, fmt.Errorf("%w: from must be before to", ErrBadQuery)
	}
	edges, err := Edges(q.Bucket, q.Location, from.In(q.Location), to.In(q.Location))
	if err != nil {
		return Summary{}, fmt.Errorf("%w: %w", ErrBadQuery, err)
	}
	out, err := s.summarize(ctx, q.Scope, edges)
	if err != nil {
		return Summary{}, err
	}
	out.Bucket, out.Location = q.Bucket, q.Location
	return out, nil
}

// summarize computes the figures of the buckets between edges.
func (s *Store) summarize(ctx context.Context, scope Scope, edges []time.Time) (Summary, error) {
	ids, sensors, err := s.summaryScope(ctx, scope)
	if err != nil {
		return Summary{}, err
	}
	out := Summary{Scope: scope, From: edges[0], To: edges[len(edges)-1], Sensors: sensors}
	var (
		units []unit
		in    carry
	)
	if sensors > 0 {
		sc := scopeSet{ids: ids, fleet: scope.Kind == ScopeFleet}
		unix := make([]int64, len(edges))
		for i, e := range edges {
			unix[i] = e.Unix()
		}
		untrusted, err := s.untrusted(ctx, unix[len(unix)-1])
		if err != nil {
			return Summary{}, err
		}
		p := newPlan(unix, s.source, untrusted)
		carried, err := s.carryIn(ctx, sc, p.from, s.source, untrusted, false, "")
		if err != nil {
			return Summary{}, err
		}
		m, err := s.units(ctx, sc, p)
		if err != nil {
			return Summary{}, err
		}
		in, units = carried[""], m.list("")
	}
	out.Buckets, out.Total = combine(edges, units, in, sensors, s.now())
	return out, nil
}

func (s *Store) scopeSensors(ctx context.Context, scope Scope) ([]string, error) {
	if s.scopes == nil {
		return nil, fmt.Errorf("analytics: no scope resolver")
	}
	return s.scopes.ScopeSensors(ctx, scope)
}

// untrusted returns the hours before to (unix seconds) whose rollups are not
// sealed; none when the store reads raw rows only.
func (s *Store) untrusted(ctx context.Context, to int64) ([]int64, error) {
	if s.source == SourceRaw {
		return nil, nil
	}
	return s.untrustedHours(ctx, to)
}

// SensorCounter is what a Scopes may also do: count the fleet's sensors
// without listing them (a fleet summary reads no sensor's id).
type SensorCounter interface {
	CountSensors(ctx context.Context) (int, error)
}

// summaryScope returns the scope's sensors and how many: for the fleet, when
// the resolver can count, the count only (the fleet's queries filter on no
// sensor).
func (s *Store) summaryScope(ctx context.Context, scope Scope) ([]string, int, error) {
	if c, ok := s.scopes.(SensorCounter); ok && scope.Kind == ScopeFleet {
		n, err := c.CountSensors(ctx)
		return nil, n, err
	}
	ids, err := s.scopeSensors(ctx, scope)
	return ids, len(ids), err
}
