package analytics

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockstream/lockstream/storage"
)

// levelColumns are the levels' columns after start and sensor_id, and
// levelRawSums the same from raw events, each an Int64 named x_<column> (the
// inner SELECTs of a diff name their columns apart from the outer sums').
var (
	levelColumns = []string{"changes", "unlocks", "unlocked_n", "unlocked_t", "losses", "lost_n", "lost_t"}
	levelRawSums = `
	toInt64(countIf(type = 'state_changed')) AS x_changes,
	toInt64(countIf(type = 'state_changed' AND ifNull(data, 1) = 0)) AS x_unlocks,
	toInt64(sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed')) AS x_unlocked_n,
	toInt64(sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed')) AS x_unlocked_t,
	toInt64(countIf(type = 'connection_lost')) AS x_losses,
	toInt64(sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored'))) AS x_lost_n,
	toInt64(sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored'))) AS x_lost_t`
)

// levelChunk is how many buckets of each level one comparison covers (a
// comparison reads the raw events of its range, FINAL).
var levelChunk = []int{48, 6, 2, 1}

// sealLevels seals the buckets of every level that ended before before and
// are unsealed or touched since their seal, as sealChunk does the hours: it
// inserts raw − level into the level and records the seal at sealedAt. A
// bucket still in progress is left (read one level down): rows still arrive
// in it. It returns how many buckets it sealed and rows it corrected.
func (s *Store) sealLevels(ctx context.Context, before, sealedAt time.Time) (int, int, error) {
	untrusted, err := s.untrustedLevels(ctx, before.Unix())
	if err != nil {
		return 0, 0, err
	}
	sealed, corrected := 0, 0
	for lvl, l := range levels {
		var ks []int64
		for k := range untrusted[lvl] {
			if (k+1)*l.width <= before.Unix() {
				ks = append(ks, k)
			}
		}
		slices.Sort(ks)
		for len(ks) > 0 {
			chunk := ks[:min(len(ks), levelChunk[lvl])]
			ks = ks[len(chunk):]
			n, err := s.sealLevelChunk(ctx, l, chunk, sealedAt)
			if err != nil {
				return sealed, corrected, err
			}
			sealed += len(chunk)
			corrected += n
		}
	}
	return sealed, corrected, nil
}

// sealLevelChunk corrects the buckets ks (sorted) of level l against the raw
// events and records their seal; it returns how many rows it corrected.
func (s *Store) sealLevelChunk(ctx context.Context, l level, ks []int64, sealedAt time.Time) (int, error) {
	in := hourList(ks) // bucket indexes, as an array literal
	lo, hi := ks[0]*l.width, (ks[len(ks)-1]+1)*l.width
	neg, sums, nonzero := make([]string, len(levelColumns)), make([]string, len(levelColumns)), make([]string, len(levelColumns))
	for i, c := range levelColumns {
		neg[i] = fmt.Sprintf("-%s AS x_%[1]s", c)
		sums[i] = fmt.Sprintf("sum(x_%s)", c)
		nonzero[i] = sums[i] + " != 0"
	}
	// The raw time range is a PREWHERE: see correction.diff.
	sql := fmt.Sprintf(`
		SELECT k, b, %[1]s FROM (
			SELECT sensor_id AS k, toInt64(intDiv(toUInt32(start), %[2]d)) AS b, %[3]s FROM %[4]s
			WHERE start >= toDateTime(%[5]d) AND start < toDateTime(%[6]d) AND has(%[7]s, intDiv(toUInt32(start), %[2]d))
			UNION ALL
			SELECT sensor_id AS k, toInt64(intDiv(toUInt32(at), %[2]d)) AS b, %[8]s FROM events FINAL
			PREWHERE at >= toDateTime(%[5]d) AND at < toDateTime(%[6]d)
			WHERE has(%[7]s, intDiv(toUInt32(at), %[2]d))
			GROUP BY k, b)
		GROUP BY k, b
		HAVING %[9]s`, strings.Join(sums, ", "), l.width, strings.Join(neg, ", "), l.table, lo, hi, in, levelRawSums,
		strings.Join(nonzero, " OR "))
	var (
		keys   []string
		starts []time.Time
		values = make([][]int64, len(levelColumns))
	)
	err := s.query(ctx, scopeSet{fleet: true}, sql, nil, func(scan func(...any) error) error {
		var (
			k string
			b int64
		)
		row := make([]int64, len(levelColumns))
		dest := []any{&k, &b}
		for i := range row {
			dest = append(dest, &row[i])
		}
		if err := scan(dest...); err != nil {
			return err
		}
		keys, starts = append(keys, k), append(starts, time.Unix(b*l.width, 0).UTC())
		for i, v := range row {
			values[i] = append(values[i], v)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if len(keys) > 0 {
		cols := []any{starts, keys}
		for _, v := range values {
			cols = append(cols, v)
		}
		insert := fmt.Sprintf("INSERT INTO %s (start, sensor_id, %s)", l.table, strings.Join(levelColumns, ", "))
		if err := s.insertBatch(ctx, insert, cols); err != nil {
			return 0, fmt.Errorf("correcting %s: %w", l.table, err)
		}
	}
	seal := fmt.Sprintf(`INSERT INTO rollup_level_seals (width, start, sealed_at)
		SELECT toUInt32(%d), toDateTime(b * %[1]d), toDateTime(%d) FROM (SELECT arrayJoin(%s) AS b)`, l.width, sealedAt.Unix(), in)
	if err := s.conn.Exec(ctx, seal); err != nil {
		return 0, fmt.Errorf("sealing %s: %w", l.table, storage.Unreachable(store, err))
	}
	return len(keys), nil
}
