package analytics

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/lockstream/lockstream/storage"
)

// Levels (migrations 00057 and 00058, docs/DESIGN.md "Analytics", levels):
// per-sensor event sums per UTC hour, day, 6-day block and 30-day span, each
// width a multiple of the one before, ordered by time first. A top
// list is a difference of two prefixes — the sums of everything before to and
// before from — and a prefix is a few level rows per sensor: whole spans,
// then blocks, days, hours and raw seconds, each level rounding to its nearest
// boundary (a prefix may take a whole bucket and subtract what lies past the
// point). A level's bucket is used only when it is trusted (sealed since the
// last insert touched it, like the hours of the rollups); any other is read
// one level down, down to raw rows.

// level is one time-first rollup: its table and its buckets' width in seconds.
type level struct {
	table string
	width int64
}

// levels, finest first.
var levels = []level{{"events_level_hour", 3600}, {"events_level_day", 86400}, {"events_level_block", 518400}, {"events_level_span", 2592000}}

// rawLevel is the index that stands for raw events in a seg.
const rawLevel = -1

// seg is part of a prefix: the rows of level lvl (rawLevel: raw events) with
// time in [lo, hi), counted sign times.
type seg struct {
	lvl          int
	lo, hi, sign int64
}

// levelPlan cuts prefixes into segs; untrusted[lvl] holds the buckets (start
// / width) of level lvl that must be read one level down.
type levelPlan struct {
	untrusted []map[int64]bool
}

// prefix returns the segs that sum to every row before x.
func (lp levelPlan) prefix(x int64) []seg {
	return lp.cover(nil, 0, x, 1, len(levels)-1)
}

// cover appends the segs that sum to the rows in [lo, hi), times sign, with
// levels up to lvl: the level's whole trusted buckets inside the range, and
// each edge either read one level down or, when that is more than half a
// bucket, as the bucket minus its part outside the range.
func (lp levelPlan) cover(out []seg, lo, hi, sign int64, lvl int) []seg {
	if lo >= hi {
		return out
	}
	if lvl < 0 {
		return append(out, seg{rawLevel, lo, hi, sign})
	}
	w := levels[lvl].width
	a, b := ceilDiv(lo, w)*w, floorDiv(hi, w)*w
	if a > b { // lo and hi in one bucket
		k := b / w
		if w-(hi-lo) < hi-lo && !lp.untrusted[lvl][k] {
			out = append(out, seg{lvl, b, a, sign})
			out = lp.cover(out, b, lo, -sign, lvl-1)
			return lp.cover(out, hi, a, -sign, lvl-1)
		}
		return lp.cover(out, lo, hi, sign, lvl-1)
	}
	out = lp.whole(out, a, b, sign, lvl)
	// The left edge [lo, a), in the bucket before a.
	if k := a/w - 1; a-lo > w/2 && !lp.untrusted[lvl][k] {
		out = append(out, seg{lvl, a - w, a, sign})
		out = lp.cover(out, a-w, lo, -sign, lvl-1)
	} else {
		out = lp.cover(out, lo, a, sign, lvl-1)
	}
	// The right edge [b, hi), in the bucket at b.
	if hi-b > w/2 && !lp.untrusted[lvl][b/w] {
		out = append(out, seg{lvl, b, b + w, sign})
		return lp.cover(out, hi, b+w, -sign, lvl-1)
	}
	return lp.cover(out, b, hi, sign, lvl-1)
}

// whole appends the buckets of level lvl in [a, b) (both on its boundaries):
// runs of trusted buckets as one seg each, the untrusted ones one level down.
func (lp levelPlan) whole(out []seg, a, b, sign int64, lvl int) []seg {
	w := levels[lvl].width
	var bad []int64
	for k := range lp.untrusted[lvl] {
		if k*w >= a && k*w < b {
			bad = append(bad, k)
		}
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i] < bad[j] })
	at := a
	for _, k := range bad {
		if at < k*w {
			out = append(out, seg{lvl, at, k * w, sign})
		}
		out = lp.cover(out, k*w, (k+1)*w, sign, lvl-1)
		at = (k + 1) * w
	}
	if at < b {
		out = append(out, seg{lvl, at, b, sign})
	}
	return out
}

// weighting is a prefix's segs and the weights of its rows: cn per unit of
// Σδ (or of a count), ct per unit of Σδ·t.
type weighting struct {
	segs   []seg
	cn, ct int64
}

// weighted is a seg whose rows count cn times their Σδ (or count) and ct
// times their Σδ·t.
type weighted struct {
	lvl    int
	lo, hi int64
	cn, ct int64
}

// merge adds up the segs of several prefixes, each with its weights (cn, ct
// per unit of sign), into disjoint weighted ranges per level, dropping those
// whose weights cancel (the spans before both ends of a range).
func merge(parts []weighting) []weighted {
	type delta struct{ cn, ct int64 }
	byLevel := map[int]map[int64]delta{} // level → breakpoint → change of weights
	for _, p := range parts {
		for _, s := range p.segs {
			m := byLevel[s.lvl]
			if m == nil {
				m = map[int64]delta{}
				byLevel[s.lvl] = m
			}
			d := m[s.lo]
			m[s.lo] = delta{d.cn + s.sign*p.cn, d.ct + s.sign*p.ct}
			d = m[s.hi]
			m[s.hi] = delta{d.cn - s.sign*p.cn, d.ct - s.sign*p.ct}
		}
	}
	var out []weighted
	for lvl, m := range byLevel {
		points := make([]int64, 0, len(m))
		for x := range m {
			points = append(points, x)
		}
		sort.Slice(points, func(i, j int) bool { return points[i] < points[j] })
		var cn, ct int64
		for i, x := range points[:len(points)-1] {
			cn, ct = cn+m[x].cn, ct+m[x].ct
			if cn == 0 && ct == 0 {
				continue
			}
			if n := len(out); n > 0 && out[n-1].lvl == lvl && out[n-1].hi == x && out[n-1].cn == cn && out[n-1].ct == ct {
				out[n-1].hi = points[i+1]
				continue
			}
			out = append(out, weighted{lvl, x, points[i+1], cn, ct})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].lvl != out[j].lvl {
			return out[i].lvl > out[j].lvl
		}
		return out[i].lo < out[j].lo
	})
	return out
}

// untrustedLevels returns, per level, the buckets that start before before
// (unix seconds) and were touched since their last seal, or never sealed.
func (s *Store) untrustedLevels(ctx context.Context, before int64) ([]map[int64]bool, error) {
	widths := make([]string, len(levels))
	index := map[int64]int{}
	for i, l := range levels {
		widths[i] = fmt.Sprint(l.width)
		index[l.width] = i
	}
	rows, err := s.conn.Query(ctx, fmt.Sprintf(`
		SELECT w, b FROM (
			SELECT toInt64(arrayJoin([%s])) AS w, toInt64(intDiv(toUInt32(hour), w)) AS b, touched_at AS t, toDateTime(0) AS s
			FROM history_touched WHERE hour < toDateTime(%[2]d)
			UNION ALL
			SELECT toInt64(width) AS w, toInt64(intDiv(toUInt32(start), width)) AS b, toDateTime(0) AS t, sealed_at AS s
			FROM rollup_level_seals WHERE start < toDateTime(%[2]d))
		GROUP BY w, b
		HAVING max(t) >= max(s) AND max(t) > toDateTime(0)`, strings.Join(widths, ", "), before))
	if err != nil {
		return nil, fmt.Errorf("reading the levels' seals: %w", storage.Unreachable(store, err))
	}
	defer rows.Close()
	out := make([]map[int64]bool, len(levels))
	for i := range out {
		out[i] = map[int64]bool{}
	}
	for rows.Next() {
		var w, b int64
		if err := rows.Scan(&w, &b); err != nil {
			return nil, fmt.Errorf("reading the levels' seals: %w", err)
		}
		if i, ok := index[w]; ok {
			out[i][b] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the levels' seals: %w", storage.Unreachable(store, err))
	}
	return out, nil
}
