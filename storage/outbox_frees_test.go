package storage_test

import (
	"testing"
	"time"

	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// FinishDeliveries says which finished deliveries held back another (Frees),
// so the retrier claims again after an outcome write only when one did.
func TestFinishDeliveriesSaysWhatItFrees(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1", "s2")
	f.Client(t, registry.Client{Name: "c"}, "s1", "s2")
	f.create(t,
		storage.NotificationInput{EventID: "lost", Type: "connection_lost", SensorID: "s1", At: outboxT0},
		storage.NotificationInput{EventID: "restored", Type: "connection_restored", SensorID: "s1", At: outboxT0.Add(time.Second)},
		storage.NotificationInput{EventID: "alone", Type: "connection_lost", SensorID: "s2", At: outboxT0},
	)
	claimed := map[string]storage.Delivery{}
	for _, d := range f.claim(t, later(), 10) {
		claimed[d.EventID] = d
	}
	if len(claimed) != 2 {
		t.Fatalf("claimed %v, want lost and alone", claimed)
	}
	finish := func(d storage.Delivery, state storage.DeliveryState) storage.FinishedDelivery {
		t.Helper()
		done, err := f.pg.FinishDeliveries(f.ctx, []storage.DeliveryFinish{{ID: d.ID, Attempt: d.Attempts, State: state,
			NextAttemptAt: later().Add(time.Hour), HTTPStatus: 503}})
		if err != nil || len(done) != 1 {
			t.Fatalf("finishing %s: %v, %v", d.EventID, done, err)
		}
		return done[0]
	}
	if got := finish(claimed["alone"], storage.DeliverySent); got.Frees {
		t.Fatalf("alone frees nothing, got %+v", got)
	}
	// A retry still holds restored back.
	if got := finish(claimed["lost"], storage.DeliveryRetry); got.Frees {
		t.Fatalf("a retrying lost frees nothing, got %+v", got)
	}
	again := f.claim(t, later().Add(2*time.Hour), 10)
	if len(again) != 1 || again[0].EventID != "lost" {
		t.Fatalf("claimed %v after the back-off, want lost", again)
	}
	if got := finish(again[0], storage.DeliverySent); !got.Frees {
		t.Fatalf("lost sent frees restored, got %+v", got)
	}
}
