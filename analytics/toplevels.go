package analytics

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// rankSum is how a ranked figure is summed: its level columns (Σδ or the
// count n, and Σδ·t for a time in a state) and the same over raw events.
type rankSum struct {
	n, t, rawN, rawT string
}

// rankSums are the ranked figures' sums, as the views of migration 00057 and
// rawEventSums compute them.
var rankSums = map[string]rankSum{
	"changes": {n: "changes", rawN: "countIf(type = 'state_changed')"},
	"unlocks": {n: "unlocks", rawN: "countIf(type = 'state_changed' AND ifNull(data, 1) = 0)"},
	"losses":  {n: "losses", rawN: "countIf(type = 'connection_lost')"},
	"unlocked_seconds": {"unlocked_n", "unlocked_t",
		"sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed')",
		"sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed')"},
	"lost_seconds": {"lost_n", "lost_t",
		"sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored'))",
		"sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored'))"},
}

// topFromLevels ranks in ClickHouse, which returns the top rows only. A
// sensor's figure over [from, to) is a difference of two prefixes P (sums of
// everything before a time): a count is P(to) − P(from); a time in a state,
// with end = min(to, max(from, now)) as combine counts it,
// carry·(end−from) + end·Σδ − Σδ·t over the range, which is
// end·Pδ(to) − Pδt(to) − from·Pδ(from) + Pδt(from).
func (s *Store) topFromLevels(ctx context.Context, scope Scope, from, to int64, by string, limit int) ([]TopItem, error) {
	sel, err := s.topSelection(ctx, scope)
	if err != nil || sel.empty {
		return []TopItem{}, err
	}
	untrusted, err := s.untrustedLevels(ctx, to+levels[len(levels)-1].width)
	if err != nil {
		return nil, err
	}
	lp := levelPlan{untrusted: untrusted}
	sum := rankSums[by]
	parts := []weighting{{lp.prefix(to), 1, 0}, {lp.prefix(from), -1, 0}}
	if sum.t != "" {
		end := min(to, max(from, s.now().Unix()))
		parts = []weighting{{lp.prefix(to), end, -1}, {lp.prefix(from), -from, 1}}
	}
	ws := merge(parts)
	var pos, neg []TopItem
	if len(ws) > 0 {
		if pos, err = s.rankRows(ctx, sel, ws, sum, "> 0", limit); err != nil {
			return nil, err
		}
	}
	zeros := limit - len(pos)
	if zeros > 0 && len(ws) > 0 {
		if neg, err = s.rankRows(ctx, sel, ws, sum, "< 0", limit); err != nil {
			return nil, err
		}
	}
	out := append([]TopItem{}, pos...)
	if zeros > 0 {
		ids, err := sel.all(ctx)
		if err != nil {
			return nil, err
		}
		nonzero := make(map[string]bool, len(pos)+len(neg))
		for _, it := range append(pos, neg...) {
			nonzero[it.SensorID] = true
		}
		var z []string
		for _, id := range ids {
			if !nonzero[id] {
				z = append(z, id)
			}
		}
		sort.Strings(z)
		for _, id := range z[:min(len(z), zeros)] {
			out = append(out, TopItem{SensorID: id})
		}
		out = append(out, neg...)
	}
	return out[:min(len(out), limit)], nil
}

// SensorChecker is what a Scopes may also do: say which of some sensor ids
// are registered. A fleet top list then checks the rows it ranked instead of
// listing the fleet (100,000 ids from Postgres for 20 rows).
type SensorChecker interface {
	RegisteredSensors(ctx context.Context, ids []string) (map[string]bool, error)
}

// topSelection is the scope of a top list as its queries filter it (sc), how
// ranked rows are checked against the registry, and how the scope's sensors
// are listed when zeros must fill the list.
type topSelection struct {
	sc         scopeSet
	empty      bool
	registered func(ctx context.Context, ids []string) (map[string]bool, error)
	all        func(ctx context.Context) ([]string, error)
}

// topSelection resolves scope: the fleet unfiltered and checked row by row
// when the resolver can (SensorChecker), any other scope by its list.
func (s *Store) topSelection(ctx context.Context, scope Scope) (topSelection, error) {
	if c, ok := s.scopes.(SensorChecker); ok && scope.Kind == ScopeFleet {
		return topSelection{sc: scopeSet{fleet: true}, registered: c.RegisteredSensors,
			all: func(ctx context.Context) ([]string, error) { return s.scopeSensors(ctx, scope) }}, nil
	}
	ids, err := s.scopeSensors(ctx, scope)
	if err != nil || len(ids) == 0 {
		return topSelection{empty: true}, err
	}
	known := make(map[string]bool, len(ids))
	for _, id := range ids {
		known[id] = true
	}
	return topSelection{
		sc:         scopeSet{ids: ids, fleet: scope.Kind == ScopeFleet},
		registered: func(context.Context, []string) (map[string]bool, error) { return known, nil },
		all:        func(context.Context) ([]string, error) { return ids, nil },
	}, nil
}

// rankRows returns up to limit registered sensors whose figure satisfies
// cond (> 0, < 0), largest first, ties by id. The fleet's query filters on
// no sensor (history may hold sensors deleted since): it asks for more rows
// until limit registered ones are found or none are left.
func (s *Store) rankRows(ctx context.Context, sel topSelection, ws []weighted, sum rankSum, cond string, limit int) ([]TopItem, error) {
	sql, args := rankSQL(sel.sc, ws, sum)
	for ask := limit; ; ask *= 4 {
		var got []TopItem
		err := s.query(ctx, sel.sc, sql+fmt.Sprintf(`
			HAVING total %s ORDER BY total DESC, k LIMIT %d`, cond, ask), args, func(scan func(...any) error) error {
			var it TopItem
			if err := scan(&it.SensorID, &it.Value); err != nil {
				return err
			}
			got = append(got, it)
			return nil
		})
		if err != nil || len(got) == 0 {
			return nil, err
		}
		ids := make([]string, len(got))
		for i, it := range got {
			ids[i] = it.SensorID
		}
		known, err := sel.registered(ctx, ids)
		if err != nil {
			return nil, err
		}
		var out []TopItem
		for _, it := range got {
			if known[it.SensorID] && len(out) < limit {
				out = append(out, it)
			}
		}
		if len(out) == limit || len(got) < ask {
			return out, nil
		}
	}
}

// rankSQL is the ranking's query up to its HAVING: one SELECT per weighted
// range, summed per sensor (k) into total. Level rows are weighted row by
// row and summed once, outside (an inner GROUP BY per range would build a
// table of every sensor for each); raw rows are summed per sensor inside.
func rankSQL(sc scopeSet, ws []weighted, sum rankSum) (string, []any) {
	scope, scopeArgs := sc.filter("sensor_id")
	parts := make([]string, len(ws))
	var args []any
	for i, w := range ws {
		if w.lvl == rawLevel {
			v := fmt.Sprintf("toInt64(%s) * (%d)", sum.rawN, w.cn)
			if sum.t != "" {
				v += fmt.Sprintf(" + toInt64(%s) * (%d)", sum.rawT, w.ct)
			}
			// The time range as a PREWHERE: see plan.rawWhere.
			parts[i] = fmt.Sprintf(`SELECT sensor_id AS k, %s AS v FROM events FINAL
			PREWHERE at >= toDateTime(%d) AND at < toDateTime(%d) WHERE %s GROUP BY k`, v, w.lo, w.hi, scope)
		} else {
			v := fmt.Sprintf("%s * (%d)", sum.n, w.cn)
			if sum.t != "" {
				v += fmt.Sprintf(" + %s * (%d)", sum.t, w.ct)
			}
			parts[i] = fmt.Sprintf(`SELECT sensor_id AS k, toInt64(%s) AS v FROM %s
			WHERE start >= toDateTime(%d) AND start < toDateTime(%d) AND %s`, v, levels[w.lvl].table, w.lo, w.hi, scope)
		}
		args = append(args, scopeArgs...)
	}
	return `
		SELECT k, toInt64(sum(v)) AS total FROM (
			` + strings.Join(parts, "\n\t\t\tUNION ALL\n\t\t\t") + `)
		GROUP BY k`, args
}
