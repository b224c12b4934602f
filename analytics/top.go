package analytics

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// The figures a top list ranks by.
var rankable = map[string]func(Figures) int64{
	"changes":          func(f Figures) int64 { return f.Changes },
	"unlocks":          func(f Figures) int64 { return f.Unlocks },
	"unlocked_seconds": func(f Figures) int64 { return f.UnlockedSeconds },
	"losses":           func(f Figures) int64 { return f.Losses },
	"lost_seconds":     func(f Figures) int64 { return f.LostSeconds },
}

// ParseBy checks a top list's by: changes, unlocks, unlocked_seconds, losses
// or lost_seconds.
func ParseBy(raw string) error {
	if _, ok := rankable[raw]; !ok {
		return fmt.Errorf("by must be changes, unlocks, unlocked_seconds, losses or lost_seconds, got %q", raw)
	}
	return nil
}

// MaxTop is the longest top list.
const MaxTop = 1000

// TopQuery asks for the Limit sensors of Scope with the largest By over
// [From, To).
type TopQuery struct {
	Scope    Scope
	From, To time.Time
	By       string
	Limit    int
}

// TopItem is one sensor of a top list.
type TopItem struct {
	SensorID string
	Value    int64
}

// Top ranks the scope's sensors by q.By over the range, largest first, ties
// by sensor id; every sensor of the scope can appear, with 0. It reads the
// time-first levels (see levels.go), or raw rows with SourceRaw.
func (s *Store) Top(ctx context.Context, q TopQuery) ([]TopItem, error) {
	value, ok := rankable[q.By]
	if !ok {
		return nil, fmt.Errorf("%w: %w", ErrBadQuery, ParseBy(q.By))
	}
	from, to := q.From.Truncate(time.Second), q.To.Truncate(time.Second)
	if !from.Before(to) {
		return nil, fmt.Errorf("%w: from must be before to", ErrBadQuery)
	}
	if s.source != SourceRaw {
		return s.topFromLevels(ctx, q.Scope, from.Unix(), to.Unix(), q.By, q.Limit)
	}
	ids, err := s.scopeSensors(ctx, q.Scope)
	if err != nil || len(ids) == 0 {
		return []TopItem{}, err
	}
	sc := scopeSet{ids: ids, fleet: q.Scope.Kind == ScopeFleet}
	untrusted, err := s.untrusted(ctx, to.Unix())
	if err != nil {
		return nil, err
	}
	p := newPlan([]int64{from.Unix(), to.Unix()}, s.source, untrusted)
	p.bySensor = true
	carried, err := s.carryIn(ctx, sc, p.from, s.source, untrusted, true, q.By)
	if err != nil {
		return nil, err
	}
	m, err := s.units(ctx, sc, p)
	if err != nil {
		return nil, err
	}
	edges, now := []time.Time{from, to}, s.now()
	items := make([]TopItem, len(ids))
	for i, id := range ids {
		_, total := combine(edges, m.list(id), carried[id], 1, now)
		items[i] = TopItem{SensorID: id, Value: value(total)}
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].Value != items[j].Value {
			return items[i].Value > items[j].Value
		}
		return items[i].SensorID < items[j].SensorID
	})
	return items[:min(len(items), q.Limit)], nil
}
