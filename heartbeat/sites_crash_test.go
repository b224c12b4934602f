package heartbeat_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
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
		b.register(t, storage.Sensor{ID: id, Site: "hq"})
	}
	client, err := b.stores.Postgres.CreateClient(ctx, storage.Client{Name: "hq-owner",
		WebhookURL: "https://example.com/hook", Secret: "whsec_c2VjcmV0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.stores.Postgres.LinkSensor(ctx, client.ID, "a2"); err != nil {
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
	open, err := b.stores.Postgres.UnpublishedSiteEvents(ctx, time.Now().Add(time.Hour), 10, false)
	if err != nil || len(open) != 1 || open[0].ID != event.SiteOutageID("hq", b.at(3)) {
		t.Fatalf("unpublished outages %+v (%v), want hq's, decided by the dead daemon", open, err)
	}

	// The survivor sweeps on, its clock 2 × PublishTimeout past the decision
	// (the row's created_at, on the database's clock: this machine's), when a
	// site event still unpublished is taken for one whose publisher died.
	b.clock.Set(time.Now().Add(2*b.cfg.PublishTimeout + time.Second))
	for range 3 {
		b.record(t, b.tracker, "a4")
		sweep(t, d2)
	}
	if open, err := b.stores.Postgres.UnpublishedSiteEvents(ctx, time.Now().Add(time.Hour), 10, false); err != nil || len(open) != 0 {
		t.Fatalf("unpublished outages after the survivor's sweeps: %+v (%v)", open, err)
	}
	b.record(t, b.tracker, "a1", "a2", "a4")
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

	// Through the fan-out's write: the client of a2 gets one site_outage and
	// one site_restored, and no loss (covered).
	var inputs []storage.NotificationInput
	for _, e := range events {
		if e.CoveredBy != "" {
			continue
		}
		inputs = append(inputs, storage.NotificationInput{EventID: e.ID, Type: string(e.Type), SensorID: e.SensorID,
			Data: e.Data, Previous: e.Previous, At: e.At, Site: e.Site, Sensors: e.Sensors})
	}
	for _, in := range inputs { // one batch per event: a repeat comes later, as on the topic
		if _, err := b.stores.Postgres.CreateNotifications(ctx, []storage.NotificationInput{in}); err != nil {
			t.Fatal(err)
		}
	}
	feed, err := b.stores.Postgres.ListClientEvents(ctx, client.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range feed {
		types = append(types, e.Type)
	}
	if !slices.Equal(types, []string{"site_outage", "site_restored"}) {
		t.Fatalf("the client of a2 was notified of %v, want one site_outage then one site_restored", types)
	}
}
