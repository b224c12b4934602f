package storage_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// The delivery summary reads at most its window of the newest deliveries, counts
// states per endpoint with each one's latest failure; the failed list holds only
// FAILED and GIVEN_UP deliveries, newest first, in pages.
func TestClientDeliverySummaryAndFailedDeliveries(t *testing.T) {
	t.Parallel()
	// One sensor per event, so that no newer state supersedes an older one.
	f := newOutboxFixture(t, "s0", "s1", "s2", "s3")
	c := f.Client(t, registry.Client{Name: "c", Email: "c@example.com"}, "s0", "s1", "s2", "s3")
	for i := range 4 {
		f.create(t, stateChanged(fmt.Sprintf("e%d", i), fmt.Sprintf("s%d", i), i%2, outboxT0.Add(time.Duration(i)*time.Minute)))
	}
	// 8 deliveries: webhook and email of 4 events; one webhook fails, one gives
	// up, one email is sent, the rest wait.
	var failed []string
	for _, d := range f.claim(t, later(), 100) {
		switch {
		case d.Channel == storage.ChannelWebhook && d.EventID == "e0":
			if err := storagetest.FailDelivery(f.ctx, f.pg, d.ID, d.Attempts, "400 Bad Request", 400); err != nil {
				t.Fatal(err)
			}
			failed = append(failed, d.ID)
		case d.Channel == storage.ChannelWebhook && d.EventID == "e1":
			if _, err := storagetest.GiveUpDelivery(f.ctx, f.pg, d.ID, d.Attempts, "503 Service Unavailable", 503); err != nil {
				t.Fatal(err)
			}
			failed = append(failed, d.ID)
		case d.Channel == storage.ChannelEmail && d.EventID == "e0":
			if err := storagetest.CompleteDelivery(f.ctx, f.pg, d.ID, d.Attempts, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(failed) != 2 {
		t.Fatalf("claimed %d of the deliveries to fail, want 2", len(failed))
	}

	sum, err := f.pg.ClientDeliverySummary(f.ctx, c.ID, time.Now().Add(-time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Read != 8 || sum.States[storage.DeliveryFailed] != 1 || sum.States[storage.DeliveryGivenUp] != 1 ||
		sum.States[storage.DeliverySent] != 1 {
		t.Fatalf("summary = %+v", sum)
	}
	if len(sum.Endpoints) != 2 || sum.Endpoints[0].Channel != storage.ChannelWebhook || sum.Endpoints[0].Failing() != 2 ||
		sum.Endpoints[0].LastHTTPStatus == 0 || sum.Endpoints[0].LastError == "" || sum.Endpoints[1].Failing() != 0 {
		t.Fatalf("endpoints = %+v, want the webhook first with 2 failing and its last error", sum.Endpoints)
	}
	// A window of 3 reads the 3 newest deliveries only.
	if sum, err := f.pg.ClientDeliverySummary(f.ctx, c.ID, time.Now().Add(-time.Hour), 3); err != nil || sum.Read != 3 {
		t.Fatalf("summary of window 3 read %d, %v", sum.Read, err)
	}
	// Deliveries created before since are not read.
	if sum, err := f.pg.ClientDeliverySummary(f.ctx, c.ID, time.Now().Add(time.Hour), 100); err != nil || sum.Read != 0 {
		t.Fatalf("summary since an hour ahead read %d, %v", sum.Read, err)
	}

	first, err := f.pg.ClientFailedDeliveries(f.ctx, c.ID, storage.Page{Limit: 1})
	if err != nil || len(first) != 1 {
		t.Fatalf("failed page 1 = %v, %v", first, err)
	}
	second, err := f.pg.ClientFailedDeliveries(f.ctx, c.ID, storage.Page{After: first[0].ID, Limit: 5})
	if err != nil || len(second) != 1 {
		t.Fatalf("failed page 2 = %v, %v", second, err)
	}
	got := []string{first[0].ID, second[0].ID}
	slices.Sort(got)
	slices.Sort(failed)
	if !slices.Equal(got, failed) || first[0].ID < second[0].ID {
		t.Fatalf("failed deliveries = %v, want %v newest first", got, failed)
	}
}
