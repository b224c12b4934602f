package analytics_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// script is the history of the exactness tests, all in UTC: the Paris days
// of 24, 25 (the DST change: 25 hours, 03:00 CEST → 02:00 CET at 01:00 UTC)
// and 26 October 2026 run [23 Oct 22:00, 24 Oct 22:00), [24 Oct 22:00,
// 25 Oct 23:00) and [25 Oct 23:00, 26 Oct 23:00).
//
//   - sA: first reading 20 Oct (unlocked, before the range), locks 24 Oct
//     10:00, unlocked 25 Oct 00:30–01:30 (across the DST change), unlocks
//     26 Oct 22:30 and stays unlocked past the range.
//   - sB: first reading ever 24 Oct 21:00, unlocked, locks 26 Oct 01:00;
//     lost 25 Oct 00:00–02:00.
//   - sC: locked since 22 Oct; lost 23 Oct 12:00 (before the range) until
//     24 Oct 02:00, lost 25 Oct 22:30 until 26 Oct 00:30 (across a day
//     edge), lost 26 Oct 21:00 and still lost at the range's end.
//   - sD (site "other"): unlocked 31 Oct 22:00 – 1 Nov 01:00, across the
//     Paris month edge (31 Oct 23:00 UTC).
func script() ([]storage.HistoryEvent, []storage.HistoryReading) {
	at := func(s string) time.Time {
		t, err := time.Parse("2006-01-02T15:04Z", s)
		if err != nil {
			panic(err)
		}
		return t
	}
	zero, one := 0, 1
	n := 0
	ev := func(sensor, typ, when string, data, previous *int) storage.HistoryEvent {
		n++
		return storage.HistoryEvent{ID: fmt.Sprintf("%s-%02d", sensor, n), Type: typ, SensorID: sensor, Data: data,
			Previous: previous, At: at(when)}
	}
	const sc, lost, restored = "state_changed", "connection_lost", "connection_restored"
	events := []storage.HistoryEvent{
		ev("sA", sc, "2026-10-20T12:00Z", &zero, nil),
		ev("sA", sc, "2026-10-24T10:00Z", &one, &zero),
		ev("sA", sc, "2026-10-25T00:30Z", &zero, &one),
		ev("sA", sc, "2026-10-25T01:30Z", &one, &zero),
		ev("sA", sc, "2026-10-26T22:30Z", &zero, &one),
		ev("sB", sc, "2026-10-24T21:00Z", &zero, nil),
		ev("sB", lost, "2026-10-25T00:00Z", &zero, nil),
		ev("sB", restored, "2026-10-25T02:00Z", &zero, nil),
		ev("sB", sc, "2026-10-26T01:00Z", &one, &zero),
		ev("sC", sc, "2026-10-22T00:00Z", &one, nil),
		ev("sC", lost, "2026-10-23T12:00Z", &one, nil),
		ev("sC", restored, "2026-10-24T02:00Z", &one, nil),
		ev("sC", lost, "2026-10-25T22:30Z", &one, nil),
		ev("sC", restored, "2026-10-26T00:30Z", &one, nil),
		ev("sC", lost, "2026-10-26T21:00Z", &one, nil),
		ev("sD", sc, "2026-10-31T22:00Z", &zero, &one),
		ev("sD", sc, "2026-11-01T01:00Z", &one, &zero),
	}
	var readings []storage.HistoryReading
	for i, r := range []struct{ sensor, when string }{
		{"sA", "2026-10-23T22:00Z"}, // at from: counted
		{"sA", "2026-10-24T05:00Z"},
		{"sA", "2026-10-25T01:15Z"},
		{"sB", "2026-10-26T03:00Z"},
		{"sB", "2026-10-26T04:00Z"},
		{"sB", "2026-10-26T05:00Z"},
		{"sB", "2026-10-23T21:59Z"}, // before from
		{"sC", "2026-10-26T23:00Z"}, // at to: not counted
	} {
		readings = append(readings, storage.HistoryReading{SensorID: r.sensor, ReceivedAt: at(r.when), Partition: 1, Offset: int64(i)})
	}
	return events, readings
}

// exactStores registers the script's sensors and writes its history.
func exactStores(t *testing.T) *storagetest.Stores {
	t.Helper()
	stores := storagetest.New(t)
	ctx := context.Background()
	for id, site := range map[string]string{"sA": "yard", "sB": "yard", "sC": "yard", "sD": "other"} {
		if _, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: id, Address: "door " + id, Site: site}); err != nil {
			t.Fatal(err)
		}
	}
	events, readings := script()
	if err := history.NewClickHouseStore(stores.ClickHouse).InsertEvents(ctx, events); err != nil {
		t.Fatal(err)
	}
	if err := history.NewClickHouseStore(stores.ClickHouse).InsertReadings(ctx, readings); err != nil {
		t.Fatal(err)
	}
	sealAll(t, stores)
	return stores
}

// sealAll seals every hour the history holds, so that queries read the
// rollups: SealRollups leaves an hour touched in the second it starts
// unsealed, so it is called until it finds nothing left to seal.
func sealAll(t *testing.T, stores *storagetest.Stores) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := analytics.New(stores.ClickHouse.Conn(), nil, analytics.WithSealMargin(0))
	for {
		rep, err := st.SealRollups(ctx, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		if rep.Hours == 0 && rep.LevelBuckets == 0 {
			return
		}
	}
}

// figures is a bucket's figures as the test writes them by hand; mean is 0
// for none.
type figures struct {
	readings, changes, unlocks, unlocked, losses, lost, restores int64
	mean                                                         float64
	availability                                                 float64
}

func checkFigures(t *testing.T, name string, got analytics.Figures, want figures) {
	t.Helper()
	g := figures{got.Readings, got.Changes, got.Unlocks, got.UnlockedSeconds, got.Losses, got.LostSeconds, got.Restores, 0, 0}
	if got.MeanRestoreSeconds != nil {
		g.mean = *got.MeanRestoreSeconds
	}
	if got.Availability != nil {
		g.availability = *got.Availability
	}
	const eps = 1e-12
	if g.readings != want.readings || g.changes != want.changes || g.unlocks != want.unlocks || g.unlocked != want.unlocked ||
		g.losses != want.losses || g.lost != want.lost || g.restores != want.restores ||
		g.mean-want.mean > eps || want.mean-g.mean > eps || g.availability-want.availability > eps ||
		want.availability-g.availability > eps {
		t.Errorf("%s:\n got  %+v\n want %+v", name, g, want)
	}
}

var (
	paris       = mustLocation("Europe/Paris")
	rangeFrom   = time.Date(2026, 10, 24, 0, 0, 0, 0, paris) // 23 Oct 22:00 UTC
	rangeTo     = time.Date(2026, 10, 27, 0, 0, 0, 0, paris) // 26 Oct 23:00 UTC
	afterScript = func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }
)

func mustLocation(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// TestSummaryIsExact checks every figure of the summary of site yard, in
// Paris days across the DST change, against values computed by hand — once
// through the rollups and once through raw rows only.
func TestSummaryIsExact(t *testing.T) {
	t.Parallel()
	stores := exactStores(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, src := range []struct {
		name string
		src  analytics.Source
	}{{"rollups", analytics.SourceAuto}, {"raw", analytics.SourceRaw}} {
		st := analytics.New(stores.ClickHouse.Conn(), analytics.NewPostgresScopes(stores.Postgres.Pool()),
			analytics.WithClock(afterScript), analytics.WithSource(src.src))
		checkExact(ctx, t, src.name, st)
	}
}

// checkExact checks the summary of site yard in Paris days across the DST
// change against the figures computed by hand.
func checkExact(ctx context.Context, t *testing.T, name string, st *analytics.Store) {
	t.Helper()
	const day, day25 = 86400.0, 90000.0
	want := []figures{
		// 24 Oct: sA unlocked from the range's start to 10:00 (12 h, carried
		// in from 20 Oct), sB from its first reading at 21:00 to the day's
		// end (1 h); sC lost from the start (carried in) to 02:00 (4 h), its
		// restore 14 h after a loss before the range.
		{readings: 2, changes: 2, unlocks: 1, unlocked: 43200 + 3600, losses: 0, lost: 14400, restores: 1,
			mean: 50400, availability: 1 - 14400/(3*day)},
		// 25 Oct (25 h): sA 00:30–01:30, sB all day; sB lost 2 h across the
		// DST change, sC from 22:30 to the day's end.
		{readings: 1, changes: 2, unlocks: 1, unlocked: 3600 + 90000, losses: 2, lost: 7200 + 1800, restores: 1,
			mean: 7200, availability: 1 - 9000/(3*day25)},
		// 26 Oct: sA from 22:30 to the end (30 min), sB until 01:00 (2 h); sC
		// lost until 00:30 (1 h 30) and from 21:00, open at the range's end
		// (2 h); its restore 2 h after a loss of the day before.
		{readings: 3, changes: 2, unlocks: 1, unlocked: 1800 + 7200, losses: 1, lost: 5400 + 7200, restores: 1,
			mean: 7200, availability: 1 - 12600/(3*day)},
	}
	total := figures{readings: 6, changes: 6, unlocks: 3, unlocked: 46800 + 93600 + 9000, losses: 3, lost: 14400 + 9000 + 12600,
		restores: 3, mean: (50400 + 7200 + 7200) / 3.0, availability: 1 - 36000/(3*(2*day+day25))}
	sum, err := st.Summary(ctx, analytics.SummaryQuery{Scope: analytics.Scope{Kind: analytics.ScopeSite, ID: "yard"},
		From: rangeFrom, To: rangeTo, Bucket: analytics.Bucket1d, Location: paris})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Sensors != 3 || len(sum.Buckets) != 3 {
		t.Fatalf("%s: %d sensors, %d buckets; want 3 and 3", name, sum.Sensors, len(sum.Buckets))
	}
	if b := sum.Buckets[1]; b.End.Sub(b.Start) != 25*time.Hour || !b.Start.Equal(time.Date(2026, 10, 24, 22, 0, 0, 0, time.UTC)) {
		t.Fatalf("%s: 25 Oct is [%s, %s), want the 25 hours from 24 Oct 22:00 UTC", name, b.Start, b.End)
	}
	for i, w := range want {
		checkFigures(t, fmt.Sprintf("%s: bucket %d", name, i), sum.Buckets[i], w)
	}
	checkFigures(t, name+": total", sum.Total, total)
}

// TestTopIsExact ranks site yard's sensors by each figure over the same
// range, through the rollups and through raw rows.
func TestTopIsExact(t *testing.T) {
	t.Parallel()
	stores := exactStores(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, src := range []analytics.Source{analytics.SourceAuto, analytics.SourceRaw} {
		st := analytics.New(stores.ClickHouse.Conn(), analytics.NewPostgresScopes(stores.Postgres.Pool()),
			analytics.WithClock(afterScript), analytics.WithSource(src))
		checkTop(ctx, t, fmt.Sprintf("source %d", src), st)
		// A range the hour does not divide: rollups for its whole hours, raw
		// rows for the ends, the same ranking as raw rows alone.
		odd := analytics.TopQuery{Scope: analytics.Scope{Kind: analytics.ScopeSite, ID: "yard"}, From: rangeFrom.Add(10*time.Minute + 7*time.Second),
			To: rangeTo.Add(-25 * time.Minute), By: "lost_seconds", Limit: 20}
		rawStore := analytics.New(stores.ClickHouse.Conn(), analytics.NewPostgresScopes(stores.Postgres.Pool()),
			analytics.WithClock(afterScript), analytics.WithSource(analytics.SourceRaw))
		a, errA := st.Top(ctx, odd)
		r, errR := rawStore.Top(ctx, odd)
		if errA != nil || errR != nil || fmt.Sprint(a) != fmt.Sprint(r) {
			t.Errorf("source %d: top over an odd range %v (%v), raw rows %v (%v)", src, a, errA, r, errR)
		}
		// limit keeps the first.
		items, err := st.Top(ctx, analytics.TopQuery{Scope: analytics.Scope{Kind: analytics.ScopeFleet}, From: rangeFrom,
			To: rangeTo, By: "lost_seconds", Limit: 1})
		if err != nil || len(items) != 1 || items[0].SensorID != "sC" {
			t.Errorf("source %d: fleet top 1 by lost_seconds = %v, %v; want sC", src, items, err)
		}
	}
	// A sensor that history holds and the registry does not (deleted since)
	// is not ranked, though it lost the whole range: the fleet's query
	// filters on no sensor, and the rows it ranked are checked.
	ghost := storage.HistoryEvent{ID: "ghost-1", Type: "connection_lost", SensorID: "sGhost", At: rangeFrom}
	if err := history.NewClickHouseStore(stores.ClickHouse).InsertEvents(ctx, []storage.HistoryEvent{ghost}); err != nil {
		t.Fatal(err)
	}
	sealAll(t, stores)
	st := analytics.New(stores.ClickHouse.Conn(), analytics.NewPostgresScopes(stores.Postgres.Pool()), analytics.WithClock(afterScript))
	items, err := st.Top(ctx, analytics.TopQuery{Scope: analytics.Scope{Kind: analytics.ScopeFleet}, From: rangeFrom,
		To: rangeTo, By: "lost_seconds", Limit: 2})
	if err != nil || len(items) != 2 || items[0].SensorID != "sC" || items[1].SensorID != "sB" {
		t.Errorf("fleet top 2 by lost_seconds with a deleted sensor's loss = %v, %v; want sC, sB", items, err)
	}
}

// checkTop checks site yard's top lists by each figure over the range
// against the rankings computed by hand.
func checkTop(ctx context.Context, t *testing.T, name string, st *analytics.Store) {
	t.Helper()
	want := map[string]string{
		"changes":          "[sA:4 sB:2 sC:0]",
		"unlocks":          "[sA:2 sB:1 sC:0]",
		"unlocked_seconds": "[sB:100800 sA:48600 sC:0]",
		"losses":           "[sC:2 sB:1 sA:0]",
		"lost_seconds":     "[sC:28800 sB:7200 sA:0]",
	}
	for by, w := range want {
		items, err := st.Top(ctx, analytics.TopQuery{Scope: analytics.Scope{Kind: analytics.ScopeSite, ID: "yard"},
			From: rangeFrom, To: rangeTo, By: by, Limit: 20})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range items {
			got = append(got, fmt.Sprintf("%s:%d", it.SensorID, it.Value))
		}
		if fmt.Sprint(got) != w {
			t.Errorf("%s: top by %s = %v, want %s", name, by, got, w)
		}
	}
}

// TestSummaryAgreesAcrossSources cuts the same history where rollups cannot
// answer alone — Kolkata days (edges at 18:30 UTC), a range that starts and
// ends mid-hour, 15-minute buckets — and checks that rollups with raw edges
// and raw rows alone agree, and that 15-minute buckets add up to the Paris
// days. A month query checks sD's unlock across the Paris month edge, and a
// clock inside the range that a loss open at the end counts to now.
func TestSummaryAgreesAcrossSources(t *testing.T) {
	t.Parallel()
	stores := exactStores(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	scopes := analytics.NewPostgresScopes(stores.Postgres.Pool())
	auto := analytics.New(stores.ClickHouse.Conn(), scopes, analytics.WithClock(afterScript))
	raw := analytics.New(stores.ClickHouse.Conn(), scopes, analytics.WithClock(afterScript), analytics.WithSource(analytics.SourceRaw))
	yard := analytics.Scope{Kind: analytics.ScopeSite, ID: "yard"}
	summary := func(st *analytics.Store, q analytics.SummaryQuery) analytics.Summary {
		t.Helper()
		s, err := st.Summary(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, q := range []analytics.SummaryQuery{
		{Scope: yard, From: rangeFrom, To: rangeTo, Bucket: analytics.Bucket1d, Location: mustLocation("Asia/Kolkata")},
		{Scope: yard, From: rangeFrom.Add(10*time.Minute + 7*time.Second), To: rangeTo.Add(-25 * time.Minute), Bucket: analytics.Bucket1h, Location: paris},
		{Scope: analytics.Scope{Kind: analytics.ScopeFleet}, From: rangeFrom.Add(-48 * time.Hour), To: rangeTo.Add(7 * 24 * time.Hour),
			Bucket: analytics.Bucket1w, Location: paris},
	} {
		a, r := summary(auto, q), summary(raw, q)
		sameFigures(t, fmt.Sprintf("%s in %s from %s", q.Bucket, q.Location, q.From), a, r)
	}
	days := summary(auto, analytics.SummaryQuery{Scope: yard, From: rangeFrom, To: rangeTo, Bucket: analytics.Bucket1d, Location: paris})
	quarters := summary(auto, analytics.SummaryQuery{Scope: yard, From: rangeFrom, To: rangeTo, Bucket: analytics.Bucket15m, Location: paris})
	if len(quarters.Buckets) != 4*(24+25+24) {
		t.Fatalf("%d quarter-hours, want %d", len(quarters.Buckets), 4*(24+25+24))
	}
	for i, d := range days.Buckets {
		var s analytics.Figures
		for _, q := range quarters.Buckets {
			if !q.Start.Before(d.Start) && q.Start.Before(d.End) {
				s.Readings += q.Readings
				s.Changes += q.Changes
				s.Unlocks += q.Unlocks
				s.UnlockedSeconds += q.UnlockedSeconds
				s.Losses += q.Losses
				s.LostSeconds += q.LostSeconds
				s.Restores += q.Restores
			}
		}
		if s.Readings != d.Readings || s.Changes != d.Changes || s.Unlocks != d.Unlocks || s.UnlockedSeconds != d.UnlockedSeconds ||
			s.Losses != d.Losses || s.LostSeconds != d.LostSeconds || s.Restores != d.Restores {
			t.Errorf("day %d: quarter-hours add up to %+v, the day is %+v", i, s, d)
		}
	}

	// sD: unlocked 31 Oct 22:00 to 1 Nov 01:00 UTC; the Paris month edge is
	// at 31 Oct 23:00 UTC. Months are clipped to the range.
	months := summary(auto, analytics.SummaryQuery{Scope: analytics.Scope{Kind: analytics.ScopeSensor, ID: "sD"},
		From: time.Date(2026, 10, 15, 0, 0, 0, 0, paris), To: time.Date(2026, 11, 15, 0, 0, 0, 0, paris), Bucket: analytics.Bucket1mo, Location: paris})
	if len(months.Buckets) != 2 || months.Buckets[0].UnlockedSeconds != 3600 || months.Buckets[1].UnlockedSeconds != 7200 ||
		months.Buckets[0].Unlocks != 1 || months.Buckets[1].Changes != 1 || !months.Buckets[1].Start.Equal(time.Date(2026, 10, 31, 23, 0, 0, 0, time.UTC)) {
		t.Errorf("sD by month: %+v", months.Buckets)
	}

	// Now is 26 Oct 22:00 UTC: sC's last loss (21:00) counts 1 h, and the
	// last day's availability is over its 23 hours so far.
	now := analytics.New(stores.ClickHouse.Conn(), scopes, analytics.WithClock(func() time.Time {
		return time.Date(2026, 10, 26, 22, 0, 0, 0, time.UTC)
	}))
	c := summary(now, analytics.SummaryQuery{Scope: analytics.Scope{Kind: analytics.ScopeSensor, ID: "sC"}, From: rangeFrom, To: rangeTo,
		Bucket: analytics.Bucket1d, Location: paris})
	checkFigures(t, "sC on 26 Oct at 22:00", c.Buckets[2], figures{losses: 1, lost: 5400 + 3600, restores: 1, mean: 7200,
		availability: 1 - 9000/82800.0})
}

// replay inserts the whole script a second time, as the at-least-once
// history writer may (a crash between its insert and its commit).
func replay(ctx context.Context, t *testing.T, stores *storagetest.Stores) {
	t.Helper()
	events, readings := script()
	if err := history.NewClickHouseStore(stores.ClickHouse).InsertEvents(ctx, events); err != nil {
		t.Fatal(err)
	}
	if err := history.NewClickHouseStore(stores.ClickHouse).InsertReadings(ctx, readings); err != nil {
		t.Fatal(err)
	}
}

// TestReplayIsExactInTheOpenMonth replays the whole history after its hours
// were sealed, the month still open (the maintainer's clock in November):
// the raw tables collapse the copies and the rollups' views sum them twice,
// yet every figure of the summary and of the top lists through the rollups
// stays the hand-computed one — the replayed hours are read raw — and
// after the next seal the rollups themselves are corrected (no drift in
// October nor in open November) and answer again. A row written into a
// sealed hour's rollup alone shows in the figures: sealed hours are read
// from the rollups.
func TestReplayIsExactInTheOpenMonth(t *testing.T) {
	t.Parallel()
	stores := exactStores(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	replay(ctx, t, stores)
	scopes := analytics.NewPostgresScopes(stores.Postgres.Pool())
	open := func() time.Time { return time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) }
	auto := analytics.New(stores.ClickHouse.Conn(), scopes, analytics.WithClock(open))
	checkExact(ctx, t, "rollups after the replay", auto)
	checkTop(ctx, t, "rollups after the replay", auto)
	oct, nov := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if d, err := auto.CheckRollups(ctx, oct); err != nil || d.Zero() {
		t.Fatalf("October's rollups after the replay: drift %+v, %v; want the copies summed by the views", d, err)
	}

	sealAll(t, stores)
	for _, m := range []time.Time{oct, nov} {
		if d, err := auto.CheckRollups(ctx, m); err != nil || !d.Zero() {
			t.Errorf("rollups of %s after the seal: drift %+v, %v; want none", m.Format("2006-01"), d, err)
		}
	}
	checkExact(ctx, t, "rollups after the seal", auto)
	checkTop(ctx, t, "rollups after the seal", auto)

	if err := stores.ClickHouse.Conn().Exec(ctx, `INSERT INTO events_hourly (sensor_id, hour, changes) SELECT 'sA', toDateTime(1792821600), toUInt64(1)`); err != nil {
		t.Fatal(err)
	}
	sum, err := auto.Summary(ctx, analytics.SummaryQuery{Scope: analytics.Scope{Kind: analytics.ScopeSensor, ID: "sA"},
		From: rangeFrom, To: rangeTo, Bucket: analytics.Bucket1d, Location: paris})
	if err != nil || sum.Total.Changes != 4+1 {
		t.Errorf("sA with a row added to a sealed hour's rollup: %+v, %v; want 5 changes (the rollup read)", sum.Total, err)
	}
}

// TestRebuildAfterReplay: RebuildRollups recomputes months from the raw
// tables, copies collapsed, whatever the seals say.
func TestRebuildAfterReplay(t *testing.T) {
	t.Parallel()
	stores := exactStores(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	replay(ctx, t, stores)
	auto := analytics.New(stores.ClickHouse.Conn(), analytics.NewPostgresScopes(stores.Postgres.Pool()), analytics.WithClock(afterScript))
	if err := auto.RebuildRollups(ctx, time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if d, err := auto.CheckRollups(ctx, time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)); err != nil || !d.Zero() {
		t.Fatalf("October after the rebuild: drift %+v, %v", d, err)
	}
	sealAll(t, stores)
	checkExact(ctx, t, "after the rebuild", auto)
}

// sameFigures fails when two summaries differ in a bucket or the total.
func sameFigures(t *testing.T, name string, a, b analytics.Summary) {
	t.Helper()
	if len(a.Buckets) != len(b.Buckets) {
		t.Errorf("%s: %d buckets and %d", name, len(a.Buckets), len(b.Buckets))
		return
	}
	for i := range a.Buckets {
		if x, y := render(a.Buckets[i]), render(b.Buckets[i]); x != y {
			t.Errorf("%s: bucket %d differs:\n rollups %s\n raw     %s", name, i, x, y)
		}
	}
	if x, y := render(a.Total), render(b.Total); x != y {
		t.Errorf("%s: totals differ:\n rollups %s\n raw     %s", name, x, y)
	}
}

func render(f analytics.Figures) string {
	p := func(v *float64) string {
		if v == nil {
			return "null"
		}
		return fmt.Sprint(*v)
	}
	return fmt.Sprintf("[%s, %s) readings %d changes %d unlocks %d unlocked %d losses %d lost %d restores %d mean %s availability %s",
		f.Start.UTC().Format(time.RFC3339), f.End.UTC().Format(time.RFC3339), f.Readings, f.Changes, f.Unlocks, f.UnlockedSeconds,
		f.Losses, f.LostSeconds, f.Restores, p(f.MeanRestoreSeconds), p(f.Availability))
}
