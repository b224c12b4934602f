package analytics

import (
	"sort"
	"time"
)

// sums are the aggregates of the rows of one unit of time (an hour of a
// rollup, or a minute or second of raw rows) over a scope's sensors. Every
// one of them is a plain sum over rows, which is why rollups can hold them and
// units add up to buckets (see Figures for how they become figures).
type sums struct {
	readings, changes, unlocks, losses, restores int64
	// unlockedN and unlockedT are Σ δ and Σ δ·t (t in unix seconds) of the
	// changes, δ = +1 entering the unlocked state, −1 leaving it; lostN and
	// lostT the same for losses (+1) and restores (−1).
	unlockedN, unlockedT, lostN, lostT int64
	// restoreSeconds sums the loss→restore time of restoresPaired restores
	// (those whose loss is known: a restore is paired with the loss before it).
	restoreSeconds, restoresPaired int64
}

func (s *sums) add(o sums) {
	s.readings += o.readings
	s.changes += o.changes
	s.unlocks += o.unlocks
	s.losses += o.losses
	s.restores += o.restores
	s.unlockedN += o.unlockedN
	s.unlockedT += o.unlockedT
	s.lostN += o.lostN
	s.lostT += o.lostT
	s.restoreSeconds += o.restoreSeconds
	s.restoresPaired += o.restoresPaired
}

// unit is the sums of the rows whose time is in [start, start+width) ∩ the
// range; a unit never straddles a bucket edge.
type unit struct {
	start int64
	s     sums
}

// Figures are the figures of one bucket, or of a whole range.
type Figures struct {
	Start, End      time.Time
	Readings        int64
	Changes         int64
	Unlocks         int64
	UnlockedSeconds int64
	Losses          int64
	LostSeconds     int64
	Restores        int64
	// MeanRestoreSeconds is nil when no restore in the bucket has a known loss.
	MeanRestoreSeconds *float64
	// Availability is 1 − LostSeconds ÷ (sensors × the bucket's length up to
	// now); nil for a scope without sensors or a bucket wholly in the future.
	Availability *float64
}

// carry is the state of the scope's sensors just before the range: how many
// were unlocked and how many lost.
type carry struct {
	unlocked, lost int64
}

// combine turns units into the figures of the buckets between edges, and
// their total. Over a bucket [a, b) a sensor's time in a state is
// in(a)·(b−a) + Σ δ·(b−t) over its changes at t in [a, b), in(a) being 1 when
// it is in the state at a; summed over sensors and split by unit this is
// N(a)·(b−a) + Σ_units (b·Σδ − Σδ·t), and N(b) = N(a) + Σ_units Σδ. Time past
// now is not counted: b is min(b, now), so a loss still open is counted to now.
func combine(edges []time.Time, units []unit, in carry, sensors int, now time.Time) ([]Figures, Figures) {
	sort.Slice(units, func(i, j int) bool { return units[i].start < units[j].start })
	buckets := make([]Figures, len(edges)-1)
	var all sums
	u := 0
	for i := range buckets {
		a, b := edges[i].Unix(), edges[i+1].Unix()
		end := min(b, max(a, now.Unix()))
		var in0 sums
		// A bucket's own sums, with δ·(end−t) accumulated as end·Σδ − Σδt.
		for ; u < len(units) && units[u].start < b; u++ {
			in0.add(units[u].s)
		}
		f := Figures{Start: edges[i], End: edges[i+1]}
		f.Readings, f.Changes, f.Unlocks = in0.readings, in0.changes, in0.unlocks
		f.Losses, f.Restores = in0.losses, in0.restores
		f.UnlockedSeconds = in.unlocked*(end-a) + end*in0.unlockedN - in0.unlockedT
		f.LostSeconds = in.lost*(end-a) + end*in0.lostN - in0.lostT
		f.MeanRestoreSeconds = mean(in0.restoreSeconds, in0.restoresPaired)
		f.Availability = availability(f.LostSeconds, sensors, end-a)
		in.unlocked += in0.unlockedN
		in.lost += in0.lostN
		all.add(in0)
		buckets[i] = f
	}
	total := Figures{Start: edges[0], End: edges[len(edges)-1]}
	for _, f := range buckets {
		total.UnlockedSeconds += f.UnlockedSeconds
		total.LostSeconds += f.LostSeconds
	}
	total.Readings, total.Changes, total.Unlocks = all.readings, all.changes, all.unlocks
	total.Losses, total.Restores = all.losses, all.restores
	total.MeanRestoreSeconds = mean(all.restoreSeconds, all.restoresPaired)
	from := edges[0].Unix()
	total.Availability = availability(total.LostSeconds, sensors, min(edges[len(edges)-1].Unix(), max(from, now.Unix()))-from)
	return buckets, total
}

func mean(sum, n int64) *float64 {
	if n == 0 {
		return nil
	}
	m := float64(sum) / float64(n)
	return &m
}

func availability(lost int64, sensors int, length int64) *float64 {
	if sensors == 0 || length <= 0 {
		return nil
	}
	a := 1 - float64(lost)/(float64(sensors)*float64(length))
	return &a
}
