package analytics

import (
	"math/rand/v2"
	"testing"
)

// TestLevelPlanCoversEachSecondOnce: for ranges at every alignment, with
// untrusted buckets at every level, the merged weighted ranges of a top
// list's two prefixes give each second before to exactly the weights the
// formula wants (those of to before from, both between), and untrusted
// buckets are only ever read one level down.
func TestLevelPlanCoversEachSecondOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 57))
	const span = 2592000
	for i := range 400 {
		// Seconds near the end of a few spans, so that spans, days and hours
		// of both kinds of edge occur; small steps so checking each second
		// stays cheap (a sample every 7 s, plus every segment's ends).
		base := int64(700 * span)
		from := base + rng.Int64N(3*span)
		to := from + 1 + rng.Int64N(2*span)
		if i%3 == 0 {
			from, to = from/3600*3600, to/86400*86400+3600*rng.Int64N(24)
		}
		lp := levelPlan{untrusted: make([]map[int64]bool, len(levels))}
		for lvl, l := range levels {
			lp.untrusted[lvl] = map[int64]bool{}
			for range rng.IntN(4) {
				lp.untrusted[lvl][(from+rng.Int64N(to-from+span))/l.width] = true
			}
		}
		ws := merge([]weighting{{lp.prefix(to), 1000, -1}, {lp.prefix(from), -7, 1}})
		for _, w := range ws {
			if w.lvl == rawLevel {
				continue
			}
			l := levels[w.lvl]
			if w.lo%l.width != 0 || w.hi%l.width != 0 {
				t.Fatalf("case %d: %+v not on level boundaries", i, w)
			}
			for k := w.lo / l.width; k < w.hi/l.width; k++ {
				if lp.untrusted[w.lvl][k] {
					t.Fatalf("case %d: %+v reads untrusted bucket %d", i, w, k)
				}
			}
		}
		weight := func(x int64) (cn, ct int64) {
			for _, w := range ws {
				if x >= w.lo && x < w.hi {
					cn, ct = cn+w.cn, ct+w.ct
				}
			}
			return cn, ct
		}
		check := func(x int64) {
			if x < 0 { // history starts at the epoch
				return
			}
			wantN, wantT := int64(0), int64(0)
			if x < to {
				wantN, wantT = 1000, -1
			}
			if x < from {
				wantN, wantT = wantN-7, wantT+1
			}
			if n, tt := weight(x); n != wantN || tt != wantT {
				t.Fatalf("case %d [%d, %d): second %d weighs (%d, %d), want (%d, %d); plan %+v", i, from, to, x, n, tt, wantN, wantT, ws)
			}
		}
		for _, w := range ws {
			for _, x := range []int64{w.lo - 1, w.lo, w.hi - 1, w.hi} {
				check(x)
			}
		}
		for _, x := range []int64{0, from - 1, from, to - 1, to, to + span} {
			check(x)
		}
		for x := from - span; x < to+span; x += 7 + rng.Int64N(3600) {
			check(x)
		}
	}
}
