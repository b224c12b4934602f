package heartbeat_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// A site of four with three falling silent gets one site_outage, from two
// daemons sweeping the same stores, listing the three; their losses are
// published covered by it (history keeps them, nobody is notified); a sensor
// without a site is lost as before. When two of the three are back, one
// site_restored follows.
func TestSiteOutageOnceThenRestored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"a1", "a2", "a3", "a4"} {
		b.register(t, registry.Sensor{ID: id, Site: "hq"})
	}
	b.register(t, registry.Sensor{ID: "solo"})
	d1, reg1 := b.newDaemon(t, nil)
	d2, reg2 := b.newDaemon(t, nil)
	// sites sums a site counter over both daemons: each event is counted once,
	// by the daemon that published it.
	sites := func(name string) float64 {
		return counter(t, reg1, "lockstream_heartbeat_"+name) + counter(t, reg2, "lockstream_heartbeat_"+name)
	}
	b.record(t, b.tracker, "a1", "a2", "a3", "a4", "solo")
	for step := 1; step <= 32; step++ {
		b.advance(float64(step) / 4)
		b.record(t, b.tracker, "a4")
		sweep(t, d1)
		sweep(t, d2)
	}
	events := b.published(t)
	var outages []event.Event
	lost := map[string]event.Event{}
	for _, e := range events {
		switch e.Type {
		case event.SiteOutage:
			outages = append(outages, e)
		case event.ConnectionLost:
			if _, dup := lost[e.SensorID]; dup {
				t.Errorf("%s lost twice", e.SensorID)
			}
			lost[e.SensorID] = e
		}
	}
	if len(outages) != 1 || sites("site_outages_total") != 1 {
		t.Fatalf("site outages %+v (counted %v), want one", outages, sites("site_outages_total"))
	}
	o := outages[0]
	if o.Site != "hq" || fmt.Sprint(o.Sensors) != "[a1 a2 a3]" || o.SensorID != "a1" || o.Severity != event.Warning ||
		o.ID != event.SiteOutageID("hq", b.at(3)) {
		t.Fatalf("outage = %+v, want hq's, listing a1 a2 a3", o)
	}
	for _, id := range []string{"a1", "a2", "a3"} {
		if lost[id].CoveredBy != o.ID {
			t.Errorf("loss of %s = %+v, want it covered by the outage", id, lost[id])
		}
	}
	if l, ok := lost["solo"]; !ok || l.CoveredBy != "" {
		t.Errorf("loss of solo = %+v (%v), want an uncovered loss", l, ok)
	}
	if _, ok := lost["a4"]; ok {
		t.Error("a4 kept reporting but was lost")
	}

	// a1 is back: one of three, not yet more than half.
	b.record(t, b.tracker, "a1", "a4")
	sweep(t, d1)
	sweep(t, d2)
	if n := len(ofType(b.published(t), event.SiteRestored)); n != 0 {
		t.Fatalf("%d site_restored with one of three back", n)
	}
	b.record(t, b.tracker, "a2", "a4")
	sweep(t, d2)
	sweep(t, d1)
	sweep(t, d2)
	var restored []event.Event
	for _, e := range b.published(t) {
		if e.Type == event.SiteRestored {
			restored = append(restored, e)
		}
	}
	if len(restored) != 1 || restored[0].ID != event.SiteRestoredID("hq", b.at(3)) || !slices.Equal(restored[0].Sensors, o.Sensors) {
		t.Fatalf("site_restored = %+v, want one for hq", restored)
	}
	if n := sites("site_restored_total"); n != 1 {
		t.Errorf("site_restored_total = %v, want 1", n)
	}
	// A new outage may open later: the old one is closed.
	outs, err := b.hb.Postgres.OpenSiteOutagesPublished(context.Background(), 10)
	if err != nil || len(outs) != 0 {
		t.Fatalf("open outages after the restore: %+v, %v", outs, err)
	}
}

// Two of a site of four lost is not an outage (SiteOutageMin 3): the losses
// are published, held only until SiteHold after their deadline.
func TestSmallSiteLossIsNoOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"b1", "b2", "b3", "b4"} {
		b.register(t, registry.Sensor{ID: id, Site: "shop"})
	}
	d, _ := b.newDaemon(t, nil)
	b.record(t, b.tracker, "b1", "b2", "b3", "b4")
	sweep(t, d) // builds the sets: a later first sweep would rebuild them
	b.advance(3.5)
	b.record(t, b.tracker, "b3", "b4")
	sweep(t, d)
	if n := len(b.published(t)); n != 0 {
		t.Fatalf("%d events published within the hold", n)
	}
	b.advance(5)
	b.record(t, b.tracker, "b3", "b4")
	sweep(t, d)
	events := b.published(t)
	if got := ofType(events, event.ConnectionLost); len(got) != 2 || len(ofType(events, event.SiteOutage)) != 0 {
		t.Fatalf("published %+v, want b1's and b2's losses and no outage", events)
	}
	for _, e := range events {
		if e.CoveredBy != "" {
			t.Errorf("%+v covered with no outage", e)
		}
	}
}

// A loss inside a maintenance window of its sensor, or of its site, is
// covered by the window's maintenance_ended; a loss outside any window is not;
// when the window ends, two daemons publish one maintenance_ended listing the
// sensors that went silent inside it.
func TestMaintenanceCoversLossesAndEndsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.register(t, registry.Sensor{ID: "m1"})
	b.register(t, registry.Sensor{ID: "m2", Site: "depot"})
	b.register(t, registry.Sensor{ID: "m3"})
	win, err := b.hb.Postgres.SetMaintenance(ctx, heartbeat.MaintenanceWindow{SensorID: "m1", From: b.t0, To: b.at(6)})
	if err != nil {
		t.Fatal(err)
	}
	siteWin, err := b.hb.Postgres.SetMaintenance(ctx, heartbeat.MaintenanceWindow{Site: "depot", From: b.t0, To: b.at(6)})
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := b.newDaemon(t, nil)
	d2, _ := b.newDaemon(t, nil)
	b.record(t, b.tracker, "m1", "m2", "m3")
	for step := 0; step <= 40; step++ {
		b.advance(float64(step) / 4)
		sweep(t, d1)
		sweep(t, d2)
	}
	lost := map[string]event.Event{}
	var ended []event.Event
	for _, e := range b.published(t) {
		switch e.Type {
		case event.ConnectionLost:
			lost[e.SensorID] = e
		case event.MaintenanceEnded:
			ended = append(ended, e)
		}
	}
	if lost["m1"].CoveredBy != event.MaintenanceEndedID(win.ID) || lost["m2"].CoveredBy != event.MaintenanceEndedID(siteWin.ID) {
		t.Errorf("losses in maintenance %+v, %+v; want them covered by their windows", lost["m1"], lost["m2"])
	}
	if l, ok := lost["m3"]; !ok || l.CoveredBy != "" {
		t.Errorf("m3's loss %+v (%v): want it uncovered", l, ok)
	}
	if len(ended) != 2 {
		t.Fatalf("maintenance_ended events %+v, want one per window", ended)
	}
	for _, e := range ended {
		switch e.ID {
		case event.MaintenanceEndedID(win.ID):
			if e.SensorID != "m1" || fmt.Sprint(e.Sensors) != "[m1]" {
				t.Errorf("m1's window ended with %+v", e)
			}
		case event.MaintenanceEndedID(siteWin.ID):
			if e.Site != "depot" || e.SensorID != "m2" || fmt.Sprint(e.Sensors) != "[m2]" {
				t.Errorf("depot's window ended with %+v", e)
			}
		default:
			t.Errorf("unexpected %+v", e)
		}
	}
}

// A window that another heartbeat ends while a loss inside it is being covered
// does not take the loss: the covering statement waits for the ending one's
// row lock, then sees the window ended, so the loss is reported uncovered (and
// notified) rather than silenced by a maintenance_ended already published
// without it.
func TestMaintenanceEndedMeanwhileCoversNoLoss(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := setup(t)
	b.register(t, registry.Sensor{ID: "m1"})
	win, err := b.hb.Postgres.SetMaintenance(ctx, heartbeat.MaintenanceWindow{SensorID: "m1", From: b.t0, To: b.at(6)})
	if err != nil {
		t.Fatal(err)
	}
	pool := b.stores.Postgres.Pool()
	// The heartbeat ending the window holds its row, not committed yet (the
	// update EndMaintenance makes).
	ending, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ending.Rollback(context.WithoutCancel(ctx)) }()
	var endingPID int
	if err := ending.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&endingPID); err != nil {
		t.Fatal(err)
	}
	if _, err := ending.Exec(ctx, `UPDATE maintenance_windows SET ended_at = now() WHERE id = $1`, win.ID); err != nil {
		t.Fatal(err)
	}
	type covered struct {
		windows map[string]string
		err     error
	}
	done := make(chan covered, 1)
	go func() {
		windows, err := b.hb.Postgres.CoverByMaintenance(ctx, []string{"m1"}, []string{""}, []time.Time{b.at(1)})
		done <- covered{windows, err}
	}()
	// The covering statement waits for the ending one (Postgres says so),
	// which then commits.
	storagetest.WaitBlockedBy(ctx, t, pool.Config().ConnConfig, endingPID,
		"the cover waits for the window's end", func() bool { return len(done) > 0 })
	if err := ending.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	if len(got.windows) != 0 {
		t.Fatalf("m1's loss covered by %v, a window ended meanwhile; want it uncovered", got.windows)
	}
	var silent []string
	if err := pool.QueryRow(ctx, `SELECT coalesce(silent, '{}') FROM maintenance_windows WHERE id = $1`, win.ID).
		Scan(&silent); err != nil {
		t.Fatal(err)
	}
	if len(silent) != 0 {
		t.Fatalf("the ended window's silent list took %v", silent)
	}
}
