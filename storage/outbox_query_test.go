package storage_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

func TestListClientDeliveriesNewestFirst(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1", "s2", "s3", "s4")
	c := f.Client(t, registry.Client{Name: "c", Email: "c@example.com"}, "s1", "s2", "s3", "s4")
	other := f.Client(t, registry.Client{Name: "other"}, "s1")
	// Two batches, so that creation order is known across them: e4 is newer than
	// everything else whatever the ids within a batch.
	f.create(t,
		storage.NotificationInput{EventID: "e1", Type: "connection_lost", SensorID: "s1", At: outboxT0},
		storage.NotificationInput{EventID: "e2", Type: "connection_lost", SensorID: "s2", At: outboxT0.Add(time.Hour)},
		storage.NotificationInput{EventID: "e3", Type: "connection_lost", SensorID: "s3", At: outboxT0.Add(2 * time.Hour)},
	)
	f.create(t, storage.NotificationInput{EventID: "e4", Type: "connection_lost", SensorID: "s4", At: outboxT0.Add(3 * time.Hour)})
	for _, d := range f.claim(t, later(), 100) {
		if d.ClientID == c.ID && d.EventID == "e2" && d.Channel == storage.ChannelWebhook {
			if err := storagetest.FailDelivery(f.ctx, f.pg, d.ID, d.Attempts, "400 Bad Request", 400); err != nil {
				t.Fatal(err)
			}
		}
	}

	list := func(filter storage.DeliveryFilter, page storage.Page) []storage.Delivery {
		t.Helper()
		ds, err := f.pg.ListClientDeliveriesNewestFirst(f.ctx, c.ID, filter, page)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	all := list(storage.DeliveryFilter{}, storage.Page{Limit: 100})
	if len(all) != 8 {
		t.Fatalf("%d deliveries, want 8 (4 events × webhook and email, none of the other client's)", len(all))
	}
	ids := make([]string, len(all))
	for i, d := range all {
		if d.ClientID != c.ID {
			t.Fatalf("delivery %d belongs to client %s", i, d.ClientID)
		}
		ids[i] = d.ID
	}
	if !slices.IsSortedFunc(ids, func(a, b string) int { return strings.Compare(b, a) }) {
		t.Fatalf("ids not newest first: %v", ids)
	}
	if all[0].EventID != "e4" || all[1].EventID != "e4" {
		t.Fatalf("newest deliveries are of %s and %s, want e4 (the last batch)", all[0].EventID, all[1].EventID)
	}
	// The other direction lists the same deliveries in reverse.
	ascending, err := f.pg.ListClientDeliveries(f.ctx, c.ID, storage.DeliveryFilter{}, storage.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(ascending)
	if got := deliveryIDs(ascending); !slices.Equal(got, ids) {
		t.Fatalf("ListClientDeliveries reversed = %v, want %v", got, ids)
	}

	// Pages of 3 walk the same list without gaps or repeats.
	var paged []string
	for after := ""; ; {
		page := list(storage.DeliveryFilter{}, storage.Page{After: after, Limit: 3})
		paged = append(paged, deliveryIDs(page)...)
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].ID
	}
	if !slices.Equal(paged, ids) {
		t.Fatalf("paged = %v, want %v", paged, ids)
	}

	// Filters: state, and event time from inclusive, to exclusive.
	failed := list(storage.DeliveryFilter{State: storage.DeliveryFailed}, storage.Page{Limit: 100})
	if len(failed) != 1 || failed[0].EventID != "e2" || failed[0].Channel != storage.ChannelWebhook || failed[0].LastHTTPStatus != 400 {
		t.Fatalf("FAILED deliveries = %+v, want e2's webhook", failed)
	}
	ranged := list(storage.DeliveryFilter{From: outboxT0.Add(time.Hour), To: outboxT0.Add(3 * time.Hour)}, storage.Page{Limit: 100})
	var events []string
	for _, d := range ranged {
		events = append(events, d.EventID)
	}
	slices.Sort(events)
	if !slices.Equal(events, []string{"e2", "e2", "e3", "e3"}) {
		t.Fatalf("events of deliveries in [T0+1h, T0+3h) = %v, want e2 e2 e3 e3", events)
	}
	if got := list(storage.DeliveryFilter{State: storage.DeliveryFailed, From: outboxT0.Add(2 * time.Hour)}, storage.Page{Limit: 100}); len(got) != 0 {
		t.Fatalf("FAILED since T0+2h = %+v, want none", got)
	}

	// The other client sees only its own.
	if ds, err := f.pg.ListClientDeliveriesNewestFirst(f.ctx, other.ID, storage.DeliveryFilter{}, storage.Page{Limit: 100}); err != nil || len(ds) != 1 || ds[0].EventID != "e1" {
		t.Fatalf("other client's deliveries = %+v, %v; want e1's webhook", ds, err)
	}

	for _, id := range []string{"0190f4a0-0000-7000-8000-000000000000", "not-a-uuid"} {
		if _, err := f.pg.ListClientDeliveriesNewestFirst(f.ctx, id, storage.DeliveryFilter{}, storage.Page{Limit: 1}); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("deliveries of client %q: err = %v, want ErrNotFound", id, err)
		}
	}
	if _, err := f.pg.ListClientDeliveriesNewestFirst(f.ctx, c.ID, storage.DeliveryFilter{}, storage.Page{After: "garbage", Limit: 1}); err == nil {
		t.Fatal("a page after a malformed id: no error")
	}
	if _, err := f.pg.ListClientDeliveriesNewestFirst(f.ctx, c.ID, storage.DeliveryFilter{State: "LOST"}, storage.Page{Limit: 1}); err == nil {
		t.Fatal("an unknown state filter: no error")
	}
}

func deliveryIDs(ds []storage.Delivery) []string {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	return ids
}
