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
func (s *Store) topFromLevels(ctx context.Context, sc scopeSet, from, to int64, by string, limit int) ([]TopItem, error) {
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
	registered := make(map[string]bool, len(sc.ids))
	for _, id := range sc.ids {
		registered[id] = true
	}
	var pos, neg []TopItem
	if len(ws) > 0 {
		if pos, err = s.rankRows(ctx, sc, ws, sum, "> 0", limit, registered); err != nil {
			return nil, err
		}
	}
	zeros := limit - len(pos)
	if zeros > 0 && len(ws) > 0 {
		if neg, err = s.rankRows(ctx, sc, ws, sum, "< 0", limit, registered); err != nil {
			return nil, err
		}
	}
	out := pos
	if zeros > 0 {
		nonzero := make(map[string]bool, len(pos)+len(neg))
		for _, it := range append(pos, neg...) {
			nonzero[it.SensorID] = true
		}
		var z []string
		for _, id := range sc.ids {
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

// rankRows returns up to limit registered sensors whose figure satisfies
// cond (> 0, < 0), largest first, ties by id. The fleet's query filters on
// no sensor (history may hold sensors deleted since): it asks for more rows
// until limit registered ones are found or none are left.
func (s *Store) rankRows(ctx context.Context, sc scopeSet, ws []weighted, sum rankSum, cond string, limit int, registered map[string]bool) ([]TopItem, error) {
	sql, args := rankSQL(sc, ws, sum)
	for ask := limit; ; ask *= 4 {
		var out []TopItem
		got := 0
		err := s.query(ctx, sc, sql+fmt.Sprintf(`
			HAVING total %s ORDER BY total DESC, k LIMIT %d`, cond, ask), args, func(scan func(...any) error) error {
			var it TopItem
			if err := scan(&it.SensorID, &it.Value); err != nil {
				return err
			}
			got++
			if registered[it.SensorID] && len(out) < limit {
				out = append(out, it)
			}
			return nil
		})
		if err != nil || len(out) == limit || got < ask {
			return out, err
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
