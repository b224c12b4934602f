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

// sealChunkHours is how many hours one correction statement covers.
const sealChunkHours = 24

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
}

// SealRollups seals every unsealed hour (or hour touched since its seal) that
// starts before before: for each, it inserts into every rollup the difference
// between the hour's raw rows (FINAL) and the rollup's sums, then records the
// seal. It is safe while the history writer inserts (an insert it may have
// half seen unseals the hour again) and when two run at once (the second
// finds no difference left, or one that the next seal corrects).
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
	return rep, nil
}

// sealChunk corrects the rollups of hours (sorted, unix seconds / 3600) and
// records their seal at sealedAt. It returns how many rows it corrected.
func (s *Store) sealChunk(ctx context.Context, hours []int64, sealedAt time.Time) (int, error) {
	list := make([]string, len(hours))
	for i, h := range hours {
		list[i] = fmt.Sprint(h)
	}
	in := "[" + strings.Join(list, ",") + "]"
	lo, hi := hours[0]*3600, (hours[len(hours)-1]+1)*3600
	corrected := 0
	for _, c := range corrections {
		var n uint64
		if err := s.conn.QueryRow(ctx, c.diff("count()", in, lo, hi)).Scan(&n); err != nil {
			return 0, fmt.Errorf("comparing %s with raw rows: %w", c.table, storage.Unreachable(store, err))
		}
		if n == 0 {
			continue
		}
		// The hours are formatted in: an INSERT … SELECT takes no arguments.
		insert := fmt.Sprintf("INSERT INTO %s (%shour, %s) ", c.table, c.key, strings.Join(c.columns, ", "))
		if err := s.conn.Exec(ctx, insert+c.diff("", in, lo, hi)); err != nil {
			return 0, fmt.Errorf("correcting %s: %w", c.table, storage.Unreachable(store, err))
		}
		corrected += int(n)
	}
	seal := fmt.Sprintf(`INSERT INTO rollup_seals (hour, sealed_at)
		SELECT toDateTime(h * 3600), toDateTime(%d) FROM (SELECT arrayJoin(%s) AS h)`, sealedAt.Unix(), in)
	if err := s.conn.Exec(ctx, seal); err != nil {
		return 0, fmt.Errorf("sealing rollups: %w", storage.Unreachable(store, err))
	}
	return corrected, nil
}

// diff is the SELECT of the rollup's rows that differ from the raw rows in
// the hours of in ([lo, hi) bounds them): key, hour and raw − rollup per
// column; with count set, the count of such rows instead.
func (c correction) diff(count, in string, lo, hi int64) string {
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
	q := fmt.Sprintf(`
		SELECT %[1]shour, %[2]s FROM (
			SELECT %[1]shour, %[10]s FROM %[11]s
			WHERE hour >= toDateTime(%[7]d) AND hour < toDateTime(%[8]d) AND has(%[9]s, intDiv(toUInt32(hour), 3600))
			UNION ALL
			SELECT %[1]s%[3]s AS hour, %[4]s FROM %[5]s FINAL
			WHERE %[6]s >= toDateTime(%[7]d) AND %[6]s < toDateTime(%[8]d) AND has(%[9]s, intDiv(toUInt32(%[6]s), 3600))
			GROUP BY %[1]shour)
		GROUP BY %[1]shour
		HAVING %[12]s`,
		c.key, strings.Join(sums, ", "), hour, c.sums, c.raw, c.col, lo, hi, in, strings.Join(neg, ", "), c.table,
		strings.Join(nonzero, " OR "))
	if count != "" {
		return "SELECT " + count + " FROM (" + q + ")"
	}
	return q
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
