package maintain_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/maintain"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// rollupBatch is one month's history of sensor r1: a reading and a change a
// day for ten days from start.
func rollupBatch(start time.Time) ([]storage.HistoryEvent, []storage.HistoryReading) {
	var events []storage.HistoryEvent
	var readings []storage.HistoryReading
	for i := range 10 {
		at := start.Add(time.Duration(i) * 24 * time.Hour)
		data, previous := i%2, 1-i%2
		events = append(events, storage.HistoryEvent{ID: fmt.Sprintf("r1-%s-%d", start.Format("200601"), i),
			Type: "state_changed", SensorID: "r1", Data: &data, Previous: &previous, At: at})
		readings = append(readings, storage.HistoryReading{SensorID: "r1", ReceivedAt: at, Partition: 0,
			Offset: start.Unix() + int64(i)})
	}
	return events, readings
}

// TestRollupsSealedEachPass: batches of October and of November are
// inserted twice (a history writer replaying after a crash); the rollups'
// views count them twice. A pass in open November seals every hour before it:
// the rollups of both months — the open one too — are corrected to the raw
// rows (40 rows a month: the sensor's and the fleet's, events and readings,
// ten hours), and the summary through the rollups equals raw rows. A later
// pass has nothing to do; a third copy of November's batch is corrected by
// the next pass, and only it.
func TestRollupsSealedEachPass(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: "r1", Address: "gate"}); err != nil {
		t.Fatal(err)
	}
	oct, nov := time.Date(2026, 10, 10, 12, 0, 0, 0, time.UTC), time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	h := history.NewClickHouseStore(stores.ClickHouse)
	insert := func(start time.Time) {
		t.Helper()
		events, readings := rollupBatch(start)
		if err := h.InsertEvents(ctx, events); err != nil {
			t.Fatal(err)
		}
		if err := h.InsertReadings(ctx, readings); err != nil {
			t.Fatal(err)
		}
	}
	for _, start := range []time.Time{oct, oct, nov, nov} { // each batch twice
		insert(start)
	}
	scopes := analytics.NewPostgresScopes(stores.Postgres.Pool())
	after := func() time.Time { return time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC) }
	// The seal counts inserts up to its own start: the test's have returned.
	auto := analytics.New(stores.ClickHouse.Conn(), scopes, analytics.WithClock(after), analytics.WithSealMargin(0))
	raw := analytics.New(stores.ClickHouse.Conn(), scopes, analytics.WithClock(after), analytics.WithSource(analytics.SourceRaw))
	drift := func(month time.Time) analytics.RollupDrift {
		t.Helper()
		d, err := auto.CheckRollups(ctx, month)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := drift(oct); d != (analytics.RollupDrift{Readings: 10, Events: 10, FleetReadings: 10, FleetEvents: 10}) {
		t.Fatalf("October's drift after the replay = %+v; want 10 copies in every rollup", d)
	}

	now := time.Date(2026, 11, 20, 12, 30, 0, 0, time.UTC) // November open
	mt, err := maintain.New(maintain.Config{Now: func() time.Time { return now }}, maintain.NewPostgresStore(stores.Postgres),
		nil, prometheus.NewRegistry(), nil, maintain.WithRollupRepair(auto))
	if err != nil {
		t.Fatal(err)
	}
	// passes runs passes until one finds nothing left to seal (an hour
	// touched in the second a seal starts waits for the next) and returns
	// the rows they corrected.
	passes := func() int {
		t.Helper()
		corrected := 0
		for {
			rep, err := mt.RunOnce(ctx)
			if err != nil {
				t.Fatalf("pass at %s: %v", now, err)
			}
			corrected += rep.RollupRowsCorrected
			if rep.RollupHoursSealed == 0 {
				return corrected
			}
		}
	}
	if n := passes(); n != 80 {
		t.Fatalf("the passes corrected %d rollup rows; want 80 (4 rollups × 10 hours × 2 months)", n)
	}
	for _, m := range []time.Time{oct, nov} {
		if d := drift(m); !d.Zero() {
			t.Fatalf("%s's drift after the seal = %+v", m.Format("2006-01"), d)
		}
	}
	summaries := func(from, to time.Time) (analytics.Summary, analytics.Summary) {
		t.Helper()
		q := analytics.SummaryQuery{Scope: analytics.Scope{Kind: analytics.ScopeSensor, ID: "r1"}, From: from, To: to,
			Bucket: analytics.Bucket1d, Location: time.UTC}
		a, err := auto.Summary(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		r, err := raw.Summary(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return a, r
	}
	a, r := summaries(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	if a.Total.Readings != 20 || a.Total.Changes != 20 || a.Total.UnlockedSeconds != r.Total.UnlockedSeconds || r.Total.Readings != 20 {
		t.Fatalf("October and November through the rollups %+v, raw %+v; want 20 readings and changes, the same time unlocked",
			a.Total, r.Total)
	}
	if n := passes(); n != 0 {
		t.Fatalf("a pass with nothing replayed corrected %d rows", n)
	}

	insert(nov) // a third copy
	a, r = summaries(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	if a.Total.Readings != 10 || a.Total.Changes != 10 || a.Total.UnlockedSeconds != r.Total.UnlockedSeconds {
		t.Fatalf("November after a third copy, through the rollups %+v, raw %+v; want 10 readings and changes", a.Total, r.Total)
	}
	if n := passes(); n != 40 {
		t.Fatalf("the passes after a third copy corrected %d rows; want 40", n)
	}
	if d := drift(nov); !d.Zero() {
		t.Fatalf("November's drift after the third copy was sealed = %+v", d)
	}
}
