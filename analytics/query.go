package analytics

import (
	"context"
	"fmt"
	"sort"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"

	"github.com/lockstream/lockstream/storage"
)

// The aggregates of raw events, as the rollup's materialized view computes
// them (migrations/clickhouse/00040_analytics_rollups.sql): the same names,
// so raw rows and rollups answer through one scan function.
const rawEventSums = `
	countIf(type = 'state_changed') AS changes,
	countIf(type = 'state_changed' AND ifNull(data, 1) = 0) AS unlocks,
	sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed') AS unlocked_n,
	sumIf((toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0)) * toInt64(toUInt32(at)), type = 'state_changed') AS unlocked_t,
	countIf(type = 'connection_lost') AS losses,
	countIf(type = 'connection_restored') AS restores,
	sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored')) AS lost_n,
	sumIf(if(type = 'connection_lost', 1, -1) * toInt64(toUInt32(at)), type IN ('connection_lost', 'connection_restored')) AS lost_t`

// scopeSet is a scope's sensors as a query filters on them: one sensor by
// equality (the primary key's prefix), several through an external table
// sent with the query (a list of 100,000 ids would not fit in its text).
type scopeSet struct {
	ids []string
	// fleet reads every sensor history holds, unfiltered: the fleet-wide
	// rollups have no sensor to filter on, and the raw rows and per-sensor
	// rollups must agree with them. Only registered sensors have events, so
	// this changes no figure but readings (those of ids nobody registered, and
	// of deleted sensors, count).
	fleet bool
}

// rollup names the rollup table of kind ("events" or "readings") to read:
// the fleet-wide one when nothing is filtered or grouped by sensor.
func (sc scopeSet) rollup(kind string, bySensor bool) string {
	if sc.fleet && !bySensor {
		return "fleet_" + kind + "_hourly"
	}
	return kind + "_hourly"
}

// filter returns the condition on col and its arguments.
func (sc scopeSet) filter(col string) (string, []any) {
	if sc.fleet {
		return "1", nil
	}
	if len(sc.ids) == 1 {
		return col + " = ?", []any{sc.ids[0]}
	}
	return col + " IN scope_sensors", nil
}

// with returns ctx carrying the external table the filter names, if any.
func (sc scopeSet) with(ctx context.Context) (context.Context, error) {
	if sc.fleet || len(sc.ids) == 1 {
		return ctx, nil
	}
	table, err := ext.NewTable("scope_sensors", ext.Column("sensor_id", "String"))
	if err != nil {
		return nil, fmt.Errorf("scope table: %w", err)
	}
	for _, id := range sc.ids {
		if err := table.Append(id); err != nil {
			return nil, fmt.Errorf("scope table: %w", err)
		}
	}
	return clickhouse.Context(ctx, clickhouse.WithExternalTable(table)), nil
}

// query runs one aggregate query over the scope and hands each row to scan.
func (s *Store) query(ctx context.Context, sc scopeSet, sql string, args []any, scan func(row func(dest ...any) error) error) error {
	ctx, err := sc.with(ctx)
	if err != nil {
		return err
	}
	rows, err := s.conn.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("querying history: %w", storage.Unreachable(store, err))
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows.Scan); err != nil {
			return fmt.Errorf("reading history: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading history: %w", storage.Unreachable(store, err))
	}
	return nil
}

// plan says where each part of a range is read from: whole UTC hours that
// hold no bucket edge from the rollups, the rest (partial hours at the
// range's ends, hours cut by an edge that is not on the hour, every hour when
// buckets are shorter than an hour or raw rows are asked for) from raw rows
// grouped by width seconds, a width that divides every edge.
type plan struct {
	from, to int64
	// rollup is false when everything is read raw.
	rollup bool
	// rawHours lists the hours (unix seconds / 3600) read raw when rollup is
	// true.
	rawHours []int64
	width    int64
	// bySensor groups by sensor instead of by unit (a top list from raw rows).
	bySensor bool
}

// groupKey is the GROUP BY of a query over rows whose time is col: the unit's
// start, or the sensor.
func (p plan) groupKey(col string) string {
	if p.bySensor {
		return "sensor_id AS k, toInt64(0) AS u"
	}
	return fmt.Sprintf("'' AS k, toInt64(intDiv(toUInt32(%s), %d) * %[2]d) AS u", col, p.width)
}

// newPlan plans the range between edges (unix seconds); untrusted lists the
// hours (unix seconds / 3600) whose rollups are not sealed, read raw.
func newPlan(edges []int64, src Source, untrusted []int64) plan {
	p := plan{from: edges[0], to: edges[len(edges)-1], width: 60}
	for _, e := range edges[1 : len(edges)-1] {
		if e%60 != 0 {
			p.width = 1
		}
	}
	first, last := ceilDiv(p.from, 3600), p.to/3600 // whole hours [first, last)
	if src == SourceRaw || first >= last {
		return p
	}
	raw := map[int64]bool{}
	if p.from%3600 != 0 {
		raw[p.from/3600] = true
	}
	if p.to%3600 != 0 {
		raw[p.to/3600] = true
	}
	for _, e := range edges[1 : len(edges)-1] {
		if e%3600 != 0 {
			raw[e/3600] = true
		}
	}
	for _, h := range untrusted {
		if h >= first && h < last {
			raw[h] = true
		}
	}
	if len(raw) > int(last-first)/2 {
		return p // more edges than whole hours: buckets under an hour
	}
	p.rollup = true
	for h := range raw {
		p.rawHours = append(p.rawHours, h)
	}
	sort.Slice(p.rawHours, func(i, j int) bool { return p.rawHours[i] < p.rawHours[j] })
	return p
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// rawWhere restricts raw rows of column col to the scope (its condition and
// arguments) and to the parts of the range the plan reads raw: the time range
// (narrowed to the hours read raw) as a PREWHERE — copies share their time, a
// sort key column, so filtering before FINAL collapses them keeps them
// together, and the other columns are read for matching rows only — and the
// hours in the WHERE.
func (p plan) rawWhere(col, scope string, scopeArgs []any) (string, []any) {
	from, to := p.from, p.to
	if p.rollup && len(p.rawHours) > 0 {
		from, to = max(from, p.rawHours[0]*3600), min(to, (p.rawHours[len(p.rawHours)-1]+1)*3600)
	}
	cond := fmt.Sprintf("PREWHERE %[1]s >= toDateTime(?) AND %[1]s < toDateTime(?) WHERE %s", col, scope)
	args := append([]any{from, to}, scopeArgs...)
	if p.rollup {
		cond += fmt.Sprintf(" AND has(?, toInt64(intDiv(toUInt32(%s), 3600)))", col)
		args = append(args, p.rawHours)
	}
	return cond, args
}

// keyed is where rows are added up: by sensor (k) or by unit start (u).
type keyed map[string]map[int64]*sums

// at returns the sums of key k and unit start u, u no earlier than from.
func (m keyed) at(k string, u, from int64) *sums {
	byStart, ok := m[k]
	if !ok {
		byStart = map[int64]*sums{}
		m[k] = byStart
	}
	u = max(u, from)
	x, ok := byStart[u]
	if !ok {
		x = &sums{}
		byStart[u] = x
	}
	return x
}

// units reads the sums of the range, unit by unit (or sensor by sensor):
// rollup hours, then raw rows, then the restores' times.
func (s *Store) units(ctx context.Context, sc scopeSet, p plan) (keyed, error) {
	m := keyed{}
	at := func(k string, start int64) *sums { return m.at(k, start, p.from) }
	if p.rollup {
		if err := s.rollupUnits(ctx, sc, p, at); err != nil {
			return nil, err
		}
	}
	if !p.rollup || len(p.rawHours) > 0 {
		if err := s.rawUnits(ctx, sc, p, at); err != nil {
			return nil, err
		}
	}
	if !p.bySensor {
		if err := s.restoreTimes(ctx, sc, p, at); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// list returns the units of key k.
func (m keyed) list(k string) []unit {
	out := make([]unit, 0, len(m[k]))
	for start, u := range m[k] {
		out = append(out, unit{start: start, s: *u})
	}
	return out
}

// rollupUnits reads the rollups' hours of the range, events and readings in
// one query: a sensor's summary is a handful of small reads, and on a busy
// server each round trip waits its turn. Hours read raw are left out here;
// the GROUP BY keeps the hour so that they can be. Top lists read the levels
// (toplevels.go), never these.
func (s *Store) rollupUnits(ctx context.Context, sc scopeSet, p plan, at func(string, int64) *sums) error {
	skip := map[int64]bool{}
	for _, h := range p.rawHours {
		skip[h] = true
	}
	scope, scopeArgs := sc.filter("sensor_id")
	var args []any
	for range 2 {
		args = append(append(args, scopeArgs...), ceilDiv(p.from, 3600)*3600, p.to/3600*3600)
	}
	return s.query(ctx, sc, `
		SELECT toUInt8(0) AS part, toInt64(toUInt32(hour)) AS h,
		       toInt64(sum(changes)), toInt64(sum(unlocks)), sum(unlocked_n), sum(unlocked_t), toInt64(sum(losses)),
		       toInt64(sum(restores)), sum(lost_n), sum(lost_t), sum(restore_seconds), sum(restores_paired), toInt64(0)
		FROM `+sc.rollup("events", false)+`
		WHERE `+scope+` AND hour >= toDateTime(?) AND hour < toDateTime(?)
		GROUP BY h
		UNION ALL
		SELECT toUInt8(1) AS part, toInt64(toUInt32(hour)) AS h,
		       toInt64(0), toInt64(0), toInt64(0), toInt64(0), toInt64(0),
		       toInt64(0), toInt64(0), toInt64(0), toInt64(0), toInt64(0), toInt64(sum(readings))
		FROM `+sc.rollup("readings", false)+`
		WHERE `+scope+` AND hour >= toDateTime(?) AND hour < toDateTime(?)
		GROUP BY h`, args, func(scan func(...any) error) error {
		var (
			part uint8
			h    int64
			e    sums
		)
		if err := scan(&part, &h, &e.changes, &e.unlocks, &e.unlockedN, &e.unlockedT, &e.losses,
			&e.restores, &e.lostN, &e.lostT, &e.restoreSeconds, &e.restoresPaired, &e.readings); err != nil || skip[h/3600] {
			return err
		}
		at("", h).add(e)
		return nil
	})
}

func (s *Store) rawUnits(ctx context.Context, sc scopeSet, p plan, at func(string, int64) *sums) error {
	scope, scopeArgs := sc.filter("sensor_id")
	where, args := p.rawWhere("at", scope, scopeArgs)
	err := s.query(ctx, sc, `
		SELECT `+p.groupKey("at")+`,`+rawEventSums+`
		FROM events FINAL `+where+`
		GROUP BY k, u`, args, func(scan func(...any) error) error {
		var (
			k string
			u int64
			e sums
		)
		if err := scanEventSums(scan, &k, &u, &e); err != nil {
			return err
		}
		at(k, u).add(e)
		return nil
	})
	if err != nil || p.bySensor { // top lists rank no readings
		return err
	}
	where, args = p.rawWhere("received_at", scope, scopeArgs)
	return s.query(ctx, sc, `
		SELECT `+p.groupKey("received_at")+`, toInt64(count())
		FROM readings FINAL `+where+`
		GROUP BY k, u`, args, func(scan func(...any) error) error {
		var (
			k    string
			u, n int64
		)
		if err := scan(&k, &u, &n); err != nil {
			return err
		}
		at(k, u).readings += n
		return nil
	})
}

// scanEventSums reads a key and the eight event aggregates, whatever integer
// types ClickHouse gave them, then the Int64 columns of more (the rollups'
// restore durations).
func scanEventSums(scan func(...any) error, k *string, key *int64, e *sums, more ...*int64) error {
	var (
		changes, unlocks, losses, restores uint64
		un, ut, ln, lt                     int64
	)
	dest := []any{k, key, &changes, &unlocks, &un, &ut, &losses, &restores, &ln, &lt}
	extra := make([]int64, len(more))
	for i := range extra {
		dest = append(dest, &extra[i])
	}
	if err := scan(dest...); err != nil {
		return err
	}
	*e = sums{changes: int64(changes), unlocks: int64(unlocks), unlockedN: un, unlockedT: ut,
		losses: int64(losses), restores: int64(restores), lostN: ln, lostT: lt}
	for i, m := range more {
		*m = extra[i]
	}
	return nil
}

// carryIn returns how many of the scope's sensors were unlocked and how many
// lost just before from (by sensor when bySensor): Σ δ over everything before
// it, from the rollups for whole trusted hours, raw rows for the hour from
// cuts and for untrusted hours (unix seconds / 3600, sorted); or raw rows only.
//
// A top list by figure reads only the carry that figure needs: none for the
// counts.
func (s *Store) carryIn(ctx context.Context, sc scopeSet, from int64, src Source, untrusted []int64, bySensor bool, figure string) (map[string]carry, error) {
	out := map[string]carry{}
	unlockedN, lostN := "sum(unlocked_n)", "sum(lost_n)"
	switch figure {
	case "":
	case "unlocked_seconds":
		lostN = "toInt64(0)"
	case "lost_seconds":
		unlockedN = "toInt64(0)"
	default:
		return out, nil
	}
	key := "'' AS k"
	if bySensor {
		key = "sensor_id AS k"
	}
	add := func(scan func(...any) error) error {
		var (
			k string
			c carry
		)
		if err := scan(&k, &c.unlocked, &c.lost); err != nil {
			return err
		}
		o := out[k]
		out[k] = carry{unlocked: o.unlocked + c.unlocked, lost: o.lost + c.lost}
		return nil
	}
	scope, args := sc.filter("sensor_id")
	rawFrom := int64(0)
	var before []int64 // untrusted hours wholly before rawFrom: read raw
	if src != SourceRaw {
		rawFrom = from / 3600 * 3600
		for _, h := range untrusted {
			if h*3600 < rawFrom {
				before = append(before, h)
			}
		}
		cond, condArgs := "hour < toDateTime(?)", []any{rawFrom}
		if len(before) > 0 {
			cond += " AND NOT has(?, toInt64(intDiv(toUInt32(hour), 3600)))"
			condArgs = append(condArgs, before)
		}
		err := s.query(ctx, sc, `
			SELECT `+key+`, `+unlockedN+`, `+lostN+` FROM `+sc.rollup("events", bySensor)+`
			WHERE `+scope+` AND `+cond+` GROUP BY k`, append(args, condArgs...), add)
		if err != nil || rawFrom == from && len(before) == 0 {
			return out, err
		}
	}
	// The time range as a PREWHERE: see plan.rawWhere.
	lo, cond, condArgs := rawFrom, "1", []any(nil)
	if len(before) > 0 {
		lo = before[0] * 3600
		cond, condArgs = "(at >= toDateTime(?) OR has(?, toInt64(intDiv(toUInt32(at), 3600))))", []any{rawFrom, before}
	}
	err := s.query(ctx, sc, `
		SELECT `+key+`,
		       sumIf(toInt64(ifNull(data, 1) = 0) - toInt64(ifNull(previous, 1) = 0), type = 'state_changed'),
		       sumIf(if(type = 'connection_lost', 1, -1), type IN ('connection_lost', 'connection_restored'))
		FROM events FINAL PREWHERE at >= toDateTime(?) AND at < toDateTime(?)
		WHERE `+scope+` AND `+cond+` GROUP BY k`,
		append(append([]any{lo, from}, args...), condArgs...), add)
	return out, err
}

// restoreTimes adds to the units the loss→restore time of each restore that
// the rollups do not hold: every restore of the range when it is read raw,
// else those in the hours read raw (sealed hours hold theirs, migration
// 00056). Pairing them needs only the window of those hours: a restore whose
// loss is before it is paired by restorePairs' second query.
func (s *Store) restoreTimes(ctx context.Context, sc scopeSet, p plan, at func(string, int64) *sums) error {
	from, to := p.from, p.to
	raw := map[int64]bool{}
	if p.rollup {
		if len(p.rawHours) == 0 {
			return nil
		}
		from, to = max(from, p.rawHours[0]*3600), min(to, (p.rawHours[len(p.rawHours)-1]+1)*3600)
		for _, h := range p.rawHours {
			raw[h] = true
		}
	}
	return s.restorePairs(ctx, sc, from, to, p.width, false, func(_ string, r, n, secs int64) {
		if p.rollup && !raw[floorDiv(r, 3600)] {
			return
		}
		x := at("", r/p.width*p.width)
		x.restoreSeconds += secs
		x.restoresPaired += n
	})
}

// restorePairs pairs each restore in [from, to) of the scope with the loss
// before it and hands add the key ("" or, bySensor, the sensor), a time in
// the unit of width seconds the restores fall in, how many and their seconds:
// within the range by sorting each sensor's losses and restores, and for a
// sensor whose first one in the range is a restore, with its last loss before
// from (a second query, on those few sensors only). Raw rows: a rollup cannot
// pair.
func (s *Store) restorePairs(ctx context.Context, sc scopeSet, from, to, width int64, bySensor bool, add func(k string, r, n, secs int64)) error {
	scope, args := sc.filter("sensor_id")
	// Per sensor, its losses ls and restores rs in the range, each sorted: a
	// restore pairs with the loss of its rank, or of the rank before when the
	// first restore comes before the first loss (its loss is before from: an
	// orphan, d = -1). Sorting two arrays of integers per sensor is what 18.16
	// does fast (lambdas there cannot read other columns, so the losses are
	// aligned with the restores by arrayPushFront/arrayResize). The outer
	// query sums paired restores per key and unit and lists orphans by sensor.
	key := "if(d < 0, sensor_id, '')"
	if bySensor {
		key = "sensor_id"
	}
	orphans := map[string]int64{}
	err := s.query(ctx, sc, fmt.Sprintf(`
		SELECT %[3]s AS k, toUInt8(d < 0) AS o, toInt64(if(d < 0, r, intDiv(r, %[1]d) * %[1]d)) AS u, toInt64(count()), toInt64(sum(d))
		FROM (
			SELECT sensor_id, rs, arrayMap((r, l) -> if(l = 0, toInt64(-1), toInt64(r) - l), rs,
				arrayResize(if(length(rs) > 0 AND (length(ls) = 0 OR rs[1] < ls[1]), arrayPushFront(ls, toUInt32(0)), ls), length(rs))) AS ds
			FROM (
				SELECT sensor_id,
				       arraySort(groupUniqArrayIf(toUInt32(at), type = 'connection_lost')) AS ls,
				       arraySort(groupUniqArrayIf(toUInt32(at), type = 'connection_restored')) AS rs
				FROM events
				WHERE %[2]s AND type IN ('connection_lost', 'connection_restored') AND at >= toDateTime(?) AND at < toDateTime(?)
				GROUP BY sensor_id))
		ARRAY JOIN rs AS r, ds AS d
		GROUP BY k, o, u`, width, scope, key), append(args, from, to), func(scan func(...any) error) error {
		var (
			k          string
			o          uint8
			u, n, secs int64
		)
		if err := scan(&k, &o, &u, &n, &secs); err != nil {
			return err
		}
		if o == 1 {
			orphans[k] = u
			return nil
		}
		add(k, u, n, secs)
		return nil
	})
	if err != nil || len(orphans) == 0 {
		return err
	}
	ids := make([]string, 0, len(orphans))
	for id := range orphans {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	lost := scopeSet{ids: ids}
	scope, args = lost.filter("sensor_id")
	return s.query(ctx, lost, `
		SELECT sensor_id, argMax(toUInt32(at), (at, type = 'connection_restored')), argMax(type, (at, type = 'connection_restored'))
		FROM events
		WHERE `+scope+` AND type IN ('connection_lost', 'connection_restored') AND at < toDateTime(?)
		GROUP BY sensor_id`, append(args, from), func(scan func(...any) error) error {
		var (
			sensor, typ string
			t           uint32
		)
		if err := scan(&sensor, &t, &typ); err != nil || typ != "connection_lost" {
			return err
		}
		k := ""
		if bySensor {
			k = sensor
		}
		r := orphans[sensor]
		add(k, r, 1, r-int64(t))
		return nil
	})
}
