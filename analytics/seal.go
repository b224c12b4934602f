package analytics

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lockstream/lockstream/storage"
)

// Seals (migration 00055, docs/DESIGN.md "Analytics"): the rollups of a UTC
// hour are trusted only when the hour is sealed — SealRollups made them equal
// to its raw rows — and no row arrived in it since; every other hour is read
// from raw rows (FINAL). A replayed batch therefore never counts twice: it
// unseals its hours until the next seal corrects them.

// DefaultSealMargin is how long before the seal's own start an insert must have
// touched an hour for the seal to count it as seen: an insert writes its raw
// rows, then its views one after the other, and the seal reads raw rows and
// rollups while inserts go on. An insert that touched the hour later than this
// leaves the hour unsealed (read raw) until the next seal. It bounds how long
// one insert's views may take.
const DefaultSealMargin = 5 * time.Minute

// sealChunkHours is how many hours one comparison covers: each reads the
// month partitions it touches, so fewer, larger chunks cost less (a first seal
// of a large history), up to the size of their GROUP BY.
const sealChunkHours = 48

// rawEventSums64 are rawEventSums, each an Int64 (UNION ALL wants equal types).
const rawEventSums64 = `
	toInt64(countIf(type = 'state_changed')) AS changes,
	toInt64(countIf(type = 'state_changed' AND ifNull(data, 1) = 0)) AS unlocks,
	toInt64(sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed')) AS unlocked_n,
	toInt64(sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed')) AS unlocked_t,
	toInt64(countIf(type = 'connection_lost')) AS losses,
	toInt64(countIf(type = 'connection_restored')) AS restores,
	toInt64(sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored'))) AS lost_n,
	toInt64(sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored'))) AS lost_t`

// corrections say, per rollup, how its sums are computed from raw rows (key,
// raw table, time column, sums as Int64): SealRollups inserts raw − rollup.
// Unsigned columns take a negative difference modulo 2^64, which their sums
// undo (ClickHouse's sums wrap).
var corrections = []correction{
	{"events_hourly", "sensor_id, ", "events", "at", rawEventSums64, eventColumns},
	{"fleet_events_hourly", "", "events", "at", rawEventSums64, eventColumns},
	{"readings_hourly", "sensor_id, ", "readings", "received_at", "toInt64(count()) AS readings", []string{"readings"}},
	{"fleet_readings_hourly", "", "readings", "received_at", "toInt64(count()) AS readings", []string{"readings"}},
}

var eventColumns = []string{"changes", "unlocks", "unlocked_n", "unlocked_t", "losses", "restores", "lost_n", "lost_t"}

// SealReport says what SealRollups did.
type SealReport struct {
	// Hours is how many hours were sealed; Corrected how many correction rows
	// (a rollup's sensor and hour whose sums differed) were inserted.
	Hours, Corrected int
	// LevelBuckets is how many buckets of the time-first levels were sealed,
	// LevelCorrected how many of their rows (a sensor and bucket) corrected.
	LevelBuckets, LevelCorrected int
}

// SealRollups seals every unsealed hour (or hour touched since its seal) that
// starts before before: for each, it inserts into every rollup the difference
// between the hour's raw rows (FINAL) and the rollup's sums, then records the
// seal. It is safe while the history writer inserts (an insert it may have
// half seen unseals the hour again) and when two run at once (the second
// finds no difference left, or one that the next seal corrects). Then it
// seals the time-first levels' buckets that ended before before the same way
// (sealLevels).
func (s *Store) SealRollups(ctx context.Context, before time.Time) (SealReport, error) {
	var now time.Time
	if err := s.conn.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return SealReport{}, fmt.Errorf("reading clickhouse's clock: %w", storage.Unreachable(store, err))
	}
	sealedAt := now.Add(-s.sealMargin)
	hours, err := s.untrustedHours(ctx, before.Unix())
	if err != nil {
		return SealReport{}, err
	}
	var rep SealReport
	for len(hours) > 0 {
		chunk := hours[:min(len(hours), sealChunkHours)]
		hours = hours[len(chunk):]
		n, err := s.sealChunk(ctx, chunk, sealedAt)
		if err != nil {
			return rep, err
		}
		rep.Hours += len(chunk)
		rep.Corrected += n
	}
	buckets, n, err := s.sealLevels(ctx, before, sealedAt)
	rep.LevelBuckets, rep.LevelCorrected = buckets, n
	return rep, err
}

// sealChunk corrects the rollups of hours (sorted, unix seconds / 3600) and
// records their seal at sealedAt. It returns how many rows it corrected.
func (s *Store) sealChunk(ctx context.Context, hours []int64, sealedAt time.Time) (int, error) {
	in := hourList(hours)
	lo, hi := hours[0]*3600, (hours[len(hours)-1]+1)*3600
	corrected := 0
	for _, c := range corrections[:2] { // events: compared row by row
		n, err := s.correct(ctx, c, in, lo, hi)
		if err != nil {
			return 0, err
		}
		corrected += n
	}
	// Readings (ten times as many): compared hour by hour first, row by row
	// in the hours that differ only.
	differ, err := s.readingHoursDiffer(ctx, in, lo, hi)
	if err != nil {
		return 0, err
	}
	for side, hs := range differ {
		n, err := s.correct(ctx, corrections[2+side], hourList(hs), hs[0]*3600, (hs[len(hs)-1]+1)*3600)
		if err != nil {
			return 0, err
		}
		corrected += n
	}
	n, err := s.sealRestores(ctx, hours, in, lo, hi)
	if err != nil {
		return 0, err
	}
	corrected += n
	seal := fmt.Sprintf(`INSERT INTO rollup_seals (hour, sealed_at)
		SELECT toDateTime(h * 3600), toDateTime(%d) FROM (SELECT arrayJoin(%s) AS h)`, sealedAt.Unix(), in)
	if err := s.conn.Exec(ctx, seal); err != nil {
		return 0, fmt.Errorf("sealing rollups: %w", storage.Unreachable(store, err))
	}
	return corrected, nil
}

// diff is the SELECT of the rollup's rows that differ from the raw rows in
// the hours of in ([lo, hi) bounds them): key ("" for the fleet), hour (unix
// seconds) and raw − rollup per column, as Int64.
func (c correction) diff(in string, lo, hi int64) string {
	neg := make([]string, len(c.columns))
	sums := make([]string, len(c.columns))
	nonzero := make([]string, len(c.columns))
	for i, col := range c.columns {
		// The first SELECT of a UNION ALL names its columns: x_… there, so
		// that the outer sums do not meet an alias of their own name.
		neg[i] = fmt.Sprintf("-toInt64(%s) AS x_%[1]s", col)
		sums[i] = fmt.Sprintf("sum(x_%s)", col)
		nonzero[i] = fmt.Sprintf("sum(x_%s) != 0", col)
	}
	hour := fmt.Sprintf("toDateTime(intDiv(toUInt32(%s), 3600) * 3600)", c.col)
	key := "''"
	if c.key != "" {
		key = "sensor_id"
	}
	// The time range is a PREWHERE: copies share their time (a sort key
	// column), so filtering before FINAL collapses them keeps them together,
	// and reads the other columns of matching rows only.
	return fmt.Sprintf(`
		SELECT %[13]s AS k, toInt64(toUInt32(hour)) AS h, %[2]s FROM (
			SELECT %[1]shour, %[10]s FROM %[11]s
			WHERE hour >= toDateTime(%[7]d) AND hour < toDateTime(%[8]d) AND has(%[9]s, intDiv(toUInt32(hour), 3600))
			UNION ALL
			SELECT %[1]s%[3]s AS hour, %[4]s FROM %[5]s FINAL
			PREWHERE %[6]s >= toDateTime(%[7]d) AND %[6]s < toDateTime(%[8]d)
			WHERE has(%[9]s, intDiv(toUInt32(%[6]s), 3600))
			GROUP BY %[1]shour)
		GROUP BY %[1]shour
		HAVING %[12]s`,
		c.key, strings.Join(sums, ", "), hour, c.sums, c.raw, c.col, lo, hi, in, strings.Join(neg, ", "), c.table,
		strings.Join(nonzero, " OR "), key)
}

// unsigned are the rollups' UInt64 columns: a negative correction goes into
// them modulo 2^64.
var unsigned = map[string]bool{"changes": true, "unlocks": true, "losses": true, "restores": true, "readings": true}

// correct inserts into c's rollup the rows by which it differs from the raw
// rows in the hours of in ([lo, hi) bounds them), and returns how many.
func (s *Store) correct(ctx context.Context, c correction, in string, lo, hi int64) (int, error) {
	var (
		keys   []string
		hours  []time.Time
		values = make([][]int64, len(c.columns))
	)
	err := s.query(ctx, scopeSet{fleet: true}, c.diff(in, lo, hi), nil, func(scan func(...any) error) error {
		var (
			k string
			h int64
		)
		row := make([]int64, len(c.columns))
		dest := []any{&k, &h}
		for i := range row {
			dest = append(dest, &row[i])
		}
		if err := scan(dest...); err != nil {
			return err
		}
		keys, hours = append(keys, k), append(hours, time.Unix(h, 0).UTC())
		for i, v := range row {
			values[i] = append(values[i], v)
		}
		return nil
	})
	if err != nil || len(hours) == 0 {
		return 0, err
	}
	var cols []any
	if c.key != "" {
		cols = append(cols, keys)
	}
	cols = append(cols, hours)
	for i, col := range c.columns {
		if !unsigned[col] {
			cols = append(cols, values[i])
			continue
		}
		u := make([]uint64, len(values[i]))
		for j, v := range values[i] {
			u[j] = uint64(v)
		}
		cols = append(cols, u)
	}
	insert := fmt.Sprintf("INSERT INTO %s (%shour, %s)", c.table, c.key, strings.Join(c.columns, ", "))
	if err := s.insertBatch(ctx, insert, cols); err != nil {
		return 0, fmt.Errorf("correcting %s: %w", c.table, err)
	}
	return len(hours), nil
}

// correction is how one rollup is computed from raw rows.
type correction struct {
	table, key, raw, col, sums string
	columns                    []string
}

// untrustedHours returns the hours (unix seconds / 3600, sorted) before
// before (unix seconds) whose rollups are not to be trusted: touched since
// their last seal, or never sealed.
func (s *Store) untrustedHours(ctx context.Context, before int64) ([]int64, error) {
	rows, err := s.conn.Query(ctx, `
		SELECT toInt64(intDiv(toUInt32(hour), 3600)) AS h FROM (
			SELECT hour, touched_at AS t, toDateTime(0) AS s FROM history_touched WHERE hour < toDateTime(?)
			UNION ALL
			SELECT hour, toDateTime(0) AS t, sealed_at AS s FROM rollup_seals WHERE hour < toDateTime(?))
		GROUP BY hour
		HAVING max(t) >= max(s) AND max(t) > toDateTime(0)
		ORDER BY h`, before, before)
	if err != nil {
		return nil, fmt.Errorf("reading the rollups' seals: %w", storage.Unreachable(store, err))
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var h int64
		if err := rows.Scan(&h); err != nil {
			return nil, fmt.Errorf("reading the rollups' seals: %w", err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the rollups' seals: %w", storage.Unreachable(store, err))
	}
	return out, nil
}

// hourKey is a rollup row's key: a sensor ("" for the fleet) and an hour
// (unix seconds / 3600).
type hourKey struct {
	sensor string
	hour   int64
}

// sealRestores makes the restore durations of the rollups' rows in hours
// (listed in in, bounded by [lo, hi)) equal to the pairing of the raw rows,
// per sensor and for the fleet, and returns how many rows it corrected.
func (s *Store) sealRestores(ctx context.Context, hours []int64, in string, lo, hi int64) (int, error) {
	chunk := map[int64]bool{}
	for _, h := range hours {
		chunk[h] = true
	}
	diff := map[hourKey][2]int64{} // seconds, paired: raw − rollup
	add := func(k hourKey, secs, n int64) {
		d := diff[k]
		diff[k] = [2]int64{d[0] + secs, d[1] + n}
	}
	err := s.restorePairs(ctx, scopeSet{fleet: true}, lo, hi, 3600, true, func(sensor string, r, n, secs int64) {
		if h := floorDiv(r, 3600); chunk[h] {
			add(hourKey{sensor, h}, secs, n)
			add(hourKey{"", h}, secs, n)
		}
	})
	if err != nil {
		return 0, err
	}
	for _, c := range []struct{ table, key string }{{"events_hourly", "sensor_id"}, {"fleet_events_hourly", "''"}} {
		err := s.query(ctx, scopeSet{fleet: true}, fmt.Sprintf(`
			SELECT %s AS k, toInt64(intDiv(toUInt32(hour), 3600)) AS h, sum(restore_seconds), sum(restores_paired)
			FROM %s
			WHERE hour >= toDateTime(%d) AND hour < toDateTime(%d) AND has(%s, intDiv(toUInt32(hour), 3600))
			GROUP BY k, h
			HAVING sum(restore_seconds) != 0 OR sum(restores_paired) != 0`, c.key, c.table, lo, hi, in), nil,
			func(scan func(...any) error) error {
				var (
					k          string
					h, secs, n int64
				)
				if err := scan(&k, &h, &secs, &n); err != nil {
					return err
				}
				add(hourKey{k, h}, -secs, -n)
				return nil
			})
		if err != nil {
			return 0, err
		}
	}
	return s.insertRestores(ctx, diff)
}

// insertRestores inserts the nonzero differences of diff into the rollups:
// the fleet's ("" keys) into fleet_events_hourly, the sensors' into
// events_hourly. It returns how many rows it inserted.
func (s *Store) insertRestores(ctx context.Context, diff map[hourKey][2]int64) (int, error) {
	type columns struct {
		sensors     []string
		hours       []time.Time
		secs, pairs []int64
	}
	var sensors, fleet columns
	for k, d := range diff {
		if d == [2]int64{} {
			continue
		}
		c := &sensors
		if k.sensor == "" {
			c = &fleet
		}
		c.sensors = append(c.sensors, k.sensor)
		c.hours = append(c.hours, time.Unix(k.hour*3600, 0).UTC())
		c.secs = append(c.secs, d[0])
		c.pairs = append(c.pairs, d[1])
	}
	for _, t := range []struct {
		insert string
		c      columns
		cols   []any
	}{
		{"INSERT INTO events_hourly (sensor_id, hour, restore_seconds, restores_paired)", sensors,
			[]any{sensors.sensors, sensors.hours, sensors.secs, sensors.pairs}},
		{"INSERT INTO fleet_events_hourly (hour, restore_seconds, restores_paired)", fleet,
			[]any{fleet.hours, fleet.secs, fleet.pairs}},
	} {
		if len(t.c.hours) == 0 {
			continue
		}
		if err := s.insertBatch(ctx, t.insert, t.cols); err != nil {
			return 0, fmt.Errorf("correcting restore durations: %w", err)
		}
	}
	return len(sensors.hours) + len(fleet.hours), nil
}

// insertBatch sends one batch, a slice per column in the order of the
// insert's column list (the only INSERT path that works on 18.16).
func (s *Store) insertBatch(ctx context.Context, insert string, columns []any) error {
	batch, err := s.conn.PrepareBatch(ctx, insert)
	if err != nil {
		return fmt.Errorf("preparing %q: %w", insert, storage.Unreachable(store, err))
	}
	defer func() { _ = batch.Abort() }()
	for i, values := range columns {
		if err := batch.Column(i).Append(values); err != nil {
			return fmt.Errorf("appending column %d of %q: %w", i, insert, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("sending %q: %w", insert, storage.Unreachable(store, err))
	}
	return nil
}

// hourList formats hours (unix seconds / 3600) as an array literal.
func hourList(hours []int64) string {
	list := make([]string, len(hours))
	for i, h := range hours {
		list[i] = fmt.Sprint(h)
	}
	return "[" + strings.Join(list, ",") + "]"
}

// readingHoursDiffer returns, for readings_hourly (0) and
// fleet_readings_hourly (1), the hours of in ([lo, hi) bounds them, sorted)
// whose rollup differs from the raw rows (FINAL). Per hour it compares the
// count and, for the per-sensor rollup, a sum weighted by a hash of the
// sensor: a copy in one sensor's hour cancelled by a row missing from
// another's escapes only if their hashes sum alike (odds of 2^-64), and then
// the hour is compared row by row at no cost of a scan of every sensor's hour.
func (s *Store) readingHoursDiffer(ctx context.Context, in string, lo, hi int64) (map[int][]int64, error) {
	out := map[int][]int64{}
	err := s.query(ctx, scopeSet{fleet: true}, fmt.Sprintf(`
		SELECT side, h FROM (
			SELECT toUInt8(0) AS side, toInt64(intDiv(toUInt32(hour), 3600)) AS h,
			       -toInt64(readings) AS n, -toInt64(cityHash64(sensor_id)) * toInt64(readings) AS w
			FROM readings_hourly
			PREWHERE hour >= toDateTime(%[1]d) AND hour < toDateTime(%[2]d)
			WHERE has(%[3]s, intDiv(toUInt32(hour), 3600))
			UNION ALL
			SELECT toUInt8(1) AS side, toInt64(intDiv(toUInt32(hour), 3600)) AS h, -toInt64(readings) AS n, toInt64(0) AS w
			FROM fleet_readings_hourly
			WHERE hour >= toDateTime(%[1]d) AND hour < toDateTime(%[2]d) AND has(%[3]s, intDiv(toUInt32(hour), 3600))
			UNION ALL
			SELECT arrayJoin([toUInt8(0), toUInt8(1)]) AS side, h, n, if(side = 0, w, toInt64(0)) AS w FROM (
				SELECT toInt64(intDiv(toUInt32(received_at), 3600)) AS h, toInt64(count()) AS n, sum(toInt64(cityHash64(sensor_id))) AS w
				FROM readings FINAL
				PREWHERE received_at >= toDateTime(%[1]d) AND received_at < toDateTime(%[2]d)
				WHERE has(%[3]s, intDiv(toUInt32(received_at), 3600))
				GROUP BY h))
		GROUP BY side, h
		HAVING sum(n) != 0 OR sum(w) != 0
		ORDER BY side, h`, lo, hi, in), nil, func(scan func(...any) error) error {
		var (
			side uint8
			h    int64
		)
		if err := scan(&side, &h); err != nil {
			return err
		}
		out[int(side)] = append(out[int(side)], h)
		return nil
	})
	return out, err
}
