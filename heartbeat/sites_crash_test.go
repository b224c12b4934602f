package heartbeat_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// diesAfterDecision is the publisher of a heartbeat process that dies in the
// window between deciding a site outage (its site_outages row inserted) and
// recording it published: the first batch holding a site_outage fails (after
// reaching Kafka when reached is set: a process killed before it learned of the
// broker's acknowledgement), and so does everything after it (the process is
// gone).
type diesAfterDecision struct {
	next    *kafkaPublisher
	reached bool

	mu   sync.Mutex
	dead bool
}

var errKilled = errors.New("the heartbeat process was killed")

func (p *diesAfterDecision) Publish(ctx context.Context, events []event.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return errKilled
	}
	if !slices.ContainsFunc(events, func(e event.Event) bool { return e.Type == event.SiteOutage }) {
		return p.next.Publish(ctx, events)
	}
	p.dead = true
	if p.reached {
		if err := p.next.Publish(ctx, events); err != nil {
			return err
		}
	}
	return errKilled
}

// A heartbeat that decided a site outage but failed to publish it (or
// published it and died before recording so) leaves the outage to the other
// daemon: it republishes the site_outage under the same id, with the same
// content, so the fan-out notifies a client once; the losses it covers are
// published covered by it; the site_restored follows once. The sensors fall
// silent a second apart, so the outage's earliest and latest deadlines differ.
func TestSiteOutageDecidedByADyingDaemonIsRepublishedOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		reached bool
	}{
		{"failed before Kafka", false},
		{"reached Kafka, died before recording it", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			siteOutageDecidedByADyingDaemon(t, tc.reached)
		})
	}
}

func siteOutageDecidedByADyingDaemon(t *testing.T, reached bool) {
	ctx := context.Background()
	b := setup(t)
	b.cfg.PublishTimeout = 5 * time.Second
	for _, id := range []string{"a1", "a2", "a3", "a4"} {
		b.register(t, registry.Sensor{ID: id, Site: "hq"})
	}
	client, err := b.stores.Registry.CreateClient(ctx, registry.Client{Name: "hq-owner",
		WebhookURL: "https://example.com/hook", Secret: "whsec_c2VjcmV0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.stores.Registry.LinkSensor(ctx, client.ID, "a2"); err != nil {
		t.Fatal(err)
	}
	dying := &diesAfterDecision{next: b.publisher(t), reached: reached}
	d1, _ := b.newDaemon(t, dying)
	d2, _ := b.newDaemon(t, nil)

	// a1 is due at t0+3, a2 and a3 at t0+4; a4 keeps reporting.
	b.record(t, b.tracker, "a1", "a4")
	b.advance(0.9)
	b.record(t, b.tracker, "a2", "a3", "a4")
	sweep(t, d1) // builds the sets
	var failed error
	for step := 8; step <= 32 && failed == nil; step++ {
		b.advance(float64(step) / 4)
		b.record(t, b.tracker, "a4")
		failed = d1.Sweep(ctx)
	}
	if !errors.Is(failed, errKilled) {
		t.Fatalf("the first daemon's sweeps ended with %v, want it killed publishing the outage", failed)
	}
	open, err := b.hb.Postgres.UnpublishedSiteEvents(ctx, b.clock.Now().Add(time.Hour), 10, false)
	if err != nil || len(open) != 1 || open[0].ID != event.SiteOutageID("hq", b.at(3)) {
		t.Fatalf("unpublished outages %+v (%v), want hq's, decided by the dead daemon", open, err)
	}

	// a3 comes back before anyone published its loss: the consumer's tracker
	// publishes it, covered by the outage like the sweep's copy (or its
	// client would be told of a loss the outage stands for).
	back := b.record(t, b.tracker, "a3")
	if len(back) != 2 || back[0].Type != event.ConnectionLost || back[0].SensorID != "a3" || back[0].CoveredBy != open[0].ID ||
		back[1].Type != event.ConnectionRestored {
		t.Fatalf("a3 back: the tracker returned %+v, want its loss covered by %s, then its restore", back, open[0].ID)
	}

	// The survivor sweeps on, its clock 2 × PublishTimeout past the decision
	// (the row's created_at, on the heartbeat's clock), when a site event
	// still unpublished is taken for one whose publisher died.
	b.clock.Set(b.clock.Now().Add(2*b.cfg.PublishTimeout + time.Second))
	for range 3 {
		b.record(t, b.tracker, "a4")
		sweep(t, d2)
	}
	if open, err := b.hb.Postgres.UnpublishedSiteEvents(ctx, b.clock.Now().Add(time.Hour), 10, false); err != nil || len(open) != 0 {
		t.Fatalf("unpublished outages after the survivor's sweeps: %+v (%v)", open, err)
	}
	back = append(back, b.record(t, b.tracker, "a1", "a2", "a4")...)
	for range 2 {
		sweep(t, d2)
	}

	events := b.published(t)
	var outages, restores []event.Event
	lost := map[string][]event.Event{}
	for _, e := range events {
		switch e.Type {
		case event.SiteOutage:
			outages = append(outages, e)
		case event.SiteRestored:
			restores = append(restores, e)
		case event.ConnectionLost:
			lost[e.SensorID] = append(lost[e.SensorID], e)
		}
	}
	if want := map[bool]int{false: 1, true: 2}[reached]; len(outages) != want {
		t.Fatalf("site_outage published %d times, want %d: %+v", len(outages), want, outages)
	}
	o := outages[0]
	if o.ID != event.SiteOutageID("hq", b.at(3)) || o.Site != "hq" || !slices.Equal(o.Sensors, []string{"a1", "a2", "a3"}) ||
		o.SensorID != "a1" || o.Severity != event.Warning {
		t.Fatalf("site_outage %+v, want hq's listing a1 a2 a3", o)
	}
	// A repeat is the same event: same id, same time (the unique key of the
	// fan-out), same content.
	first, err := o.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, again := range outages[1:] {
		if b, err := again.Encode(); err != nil || string(b) != string(first) {
			t.Errorf("republished site_outage %s (%v) differs from the first %s", b, err, first)
		}
	}
	for _, id := range []string{"a1", "a2", "a3"} {
		ids := map[string]bool{}
		for _, l := range lost[id] {
			ids[l.ID] = true
			if l.CoveredBy != o.ID {
				t.Errorf("loss of %s %+v, want it covered by the outage", id, l)
			}
		}
		if len(ids) != 1 {
			t.Errorf("%s lost under %d ids: %+v", id, len(ids), lost[id])
		}
	}
	if len(restores) != 1 || restores[0].ID != event.SiteRestoredID("hq", b.at(3)) {
		t.Fatalf("site_restored %+v, want one for hq", restores)
	}

	// Through the fan-out's write (the tracker's events reach the topic too):
	// the client of a2 gets one site_outage and one site_restored, and no loss
	// (covered).
	var inputs []storage.NotificationInput
	for _, e := range append(back, events...) {
		if e.CoveredBy != "" {
			continue
		}
		inputs = append(inputs, storage.NotificationInput{EventID: e.ID, Type: string(e.Type), SensorID: e.SensorID,
			Data: e.Data, Previous: e.Previous, At: e.At, Site: e.Site, Sensors: e.Sensors})
	}
	for _, in := range inputs { // one batch per event: a repeat comes later, as on the topic
		if _, err := fanout.NewPostgresStore(b.stores.Postgres).CreateNotifications(ctx, []storage.NotificationInput{in}); err != nil {
			t.Fatal(err)
		}
	}
	feed, err := b.stores.Postgres.ListClientEvents(ctx, client.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]int{}
	for _, e := range feed {
		types[string(e.Type)]++
	}
	if want := map[string]int{"site_outage": 1, "site_restored": 1, "connection_restored": 1}; !maps.Equal(types, want) {
		t.Fatalf("the client of a2 was notified of %v, want %v (a2's restore, and no loss: covered)", types, want)
	}
}

// A loss its sweep failed to publish, of a sensor back before the next sweep,
// is published by the tracker as the sweep would have: covered by the
// maintenance_ended of the window it fell in; a loss outside any window
// uncovered.
func TestTrackerPublishesAnUnpublishedLossCovered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.register(t, registry.Sensor{ID: "m1"})
	b.register(t, registry.Sensor{ID: "plain"})
	win, err := b.hb.Postgres.SetMaintenance(ctx, heartbeat.MaintenanceWindow{SensorID: "m1", From: b.t0, To: b.at(60)})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := b.newDaemon(t, &flakyPublisher{next: b.publisher(t), failures: 1 << 20})
	b.record(t, b.tracker, "m1", "plain")
	sweep(t, d) // builds the sets
	b.advance(4)
	if err := d.Sweep(ctx); !errors.Is(err, errBrokerDown) {
		t.Fatalf("sweep = %v, want the publication of both losses failed", err)
	}
	b.advance(5)
	lost := map[string]event.Event{}
	for _, e := range b.record(t, b.tracker, "m1", "plain") {
		if e.Type == event.ConnectionLost {
			lost[e.SensorID] = e
		}
	}
	if l, ok := lost["m1"]; !ok || l.CoveredBy != event.MaintenanceEndedID(win.ID) || l.ID != event.ConnectionLostID("m1", b.at(3)) {
		t.Errorf("m1's loss from the tracker %+v (%v), want it covered by its window's maintenance_ended", l, ok)
	}
	if l, ok := lost["plain"]; !ok || l.CoveredBy != "" {
		t.Errorf("plain's loss from the tracker %+v (%v), want it uncovered", l, ok)
	}
}
