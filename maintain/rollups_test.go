package maintain_test

import (
	"context"
	"fmt"
	"slices"
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

// TestRollupsRepairedOnceTheMonthCloses: batches of October and of November
// are inserted twice (a history writer replaying after a crash). The rollups
// count them twice; the maintainer leaves October alone for RollupSettle
// after it ends, then finds its drift and rebuilds it once (the summary
// through the rollups equals the raw rows again), leaves open November as it
// is, and rebuilds November once December has settled. No staging table is
// left behind.
func TestRollupsRepairedOnceTheMonthCloses(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: "r1", Address: "gate"}); err != nil {
		t.Fatal(err)
	}
	oct, nov := time.Date(2026, 10, 10, 12, 0, 0, 0, time.UTC), time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	h := history.NewClickHouseStore(stores.ClickHouse)
	for _, start := range []time.Time{oct, oct, nov, nov} { // each batch twice
		events, readings := rollupBatch(start)
		if err := h.InsertEvents(ctx, events); err != nil {
			t.Fatal(err)
		}
		if err := h.InsertReadings(ctx, readings); err != nil {
			t.Fatal(err)
		}
	}
	scopes := analytics.NewPostgresScopes(stores.Postgres.Pool())
	after := func() time.Time { return time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC) }
	auto := analytics.New(stores.ClickHouse.Conn(), scopes, analytics.WithClock(after))
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

	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	mt, err := maintain.New(maintain.Config{Now: func() time.Time { return now }}, maintain.NewPostgresStore(stores.Postgres),
		nil, prometheus.NewRegistry(), nil, maintain.WithRollupRepair(auto))
	if err != nil {
		t.Fatal(err)
	}
	pass := func(want ...string) {
		t.Helper()
		rep, err := mt.RunOnce(ctx)
		if err != nil {
			t.Fatalf("pass at %s: %v", now, err)
		}
		if !slices.Equal(rep.RollupsRebuilt, want) {
			t.Fatalf("pass at %s rebuilt %v; want %v", now, rep.RollupsRebuilt, want)
		}
	}
	pass() // October ended 12 h ago: late events may still come
	now = time.Date(2026, 11, 2, 1, 0, 0, 0, time.UTC)
	pass("202610")
	if d := drift(oct); !d.Zero() {
		t.Fatalf("October's drift after the rebuild = %+v", d)
	}
	if d := drift(nov); d.Readings != 10 {
		t.Fatalf("November (open) drift = %+v; want its copies still counted", d)
	}
	q := analytics.SummaryQuery{Scope: analytics.Scope{Kind: analytics.ScopeSensor, ID: "r1"},
		From: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		Bucket: analytics.Bucket1d, Location: time.UTC}
	a, err := auto.Summary(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	r, err := raw.Summary(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if a.Total.Readings != 10 || a.Total.Changes != 10 || a.Total.UnlockedSeconds != r.Total.UnlockedSeconds ||
		r.Total.Readings != 10 {
		t.Fatalf("October through the rollups %+v, raw %+v; want 10 readings and changes, the same time unlocked", a.Total, r.Total)
	}
	now = now.Add(time.Hour)
	pass() // checked again, nothing to do
	now = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	pass("202611")
	pass()
	if d := drift(nov); !d.Zero() {
		t.Fatalf("November's drift after the rebuild = %+v", d)
	}
	var staging uint64
	if err := stores.ClickHouse.Conn().QueryRow(ctx, `SELECT count() FROM system.tables
		WHERE database = currentDatabase() AND name LIKE '%_rebuild_%'`).Scan(&staging); err != nil || staging != 0 {
		t.Fatalf("staging tables left: %d, %v", staging, err)
	}
}
