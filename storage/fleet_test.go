package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// The inbox grades messages in SQL; it must agree with event.SeverityOf, which
// grades events, webhooks, emails and pushes.
func TestInboxSeverityAgreesWithEvents(t *testing.T) {
	t.Parallel()
	pg := storagetest.New(t).Postgres
	zero, one := 0, 1
	for _, typ := range append(event.Types(), event.Notices()...) {
		for _, data := range []*int{nil, &zero, &one} {
			got, err := storage.EventSeverity(context.Background(), pg, string(typ), data)
			if err != nil {
				t.Fatal(err)
			}
			if want := event.SeverityOf(typ, data); got != string(want) {
				t.Errorf("inbox severity of %s with data %v = %s, want %s", typ, data, got, want)
			}
		}
	}
}

// The outbox takes every event type, and its inbox messages are graded as the
// events are.
func TestOutboxTakesEveryEventType(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1")
	c := f.Client(t, registry.Client{Name: "c"}, "s1")
	zero := 0
	var batch []storage.NotificationInput
	for i, typ := range event.Types() {
		batch = append(batch, storage.NotificationInput{EventID: "e-" + string(typ), Type: string(typ), SensorID: "s1",
			Data: &zero, At: outboxT0.Add(time.Duration(i) * time.Second)})
	}
	if created := f.create(t, batch...); created.Notifications != len(batch) {
		t.Fatalf("created %d notifications for %d event types", created.Notifications, len(batch))
	}
	if got := f.clientEvents(t, c.ID, 0, 100); len(got) != len(batch) {
		t.Fatalf("the client's feed has %d events, want %d", len(got), len(batch))
	}
}

// A site event reaches every client of any of its sensors, once, and carries
// its site and sensors to the deliveries and the feed.
func TestSiteEventReachesEachClientOnce(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1", "s2", "s3", "s4")
	a := f.Client(t, registry.Client{Name: "a"}, "s1", "s2")
	b := f.Client(t, registry.Client{Name: "b"}, "s3")
	c := f.Client(t, registry.Client{Name: "c"}, "s4")
	created := f.create(t, storage.NotificationInput{EventID: "o1", Type: "site_outage", SensorID: "s1", At: outboxT0,
		Site: "hq", Sensors: []string{"s1", "s2", "s3"}})
	if created.Notifications != 2 {
		t.Fatalf("%d notifications, want one for a and one for b", created.Notifications)
	}
	for _, id := range []string{a.ID, b.ID} {
		ds := f.deliveries(t, id)
		if len(ds) != 1 || ds[0].Site != "hq" || len(ds[0].Sensors) != 3 || ds[0].Seq != 1 {
			t.Fatalf("deliveries of %s = %+v, want one, of site hq", id, ds)
		}
		if es := f.clientEvents(t, id, 0, 10); len(es) != 1 || es[0].Site != "hq" || es[0].Type != "site_outage" {
			t.Fatalf("feed of %s = %+v", id, es)
		}
	}
	if ds := f.deliveries(t, c.ID); len(ds) != 0 {
		t.Fatalf("c, of no listed sensor, got %+v", ds)
	}
}
