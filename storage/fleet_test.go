package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// The inbox grades messages in SQL; it must agree with event.SeverityOf, which
// grades events, webhooks, emails and pushes.
func TestInboxSeverityAgreesWithEvents(t *testing.T) {
	t.Parallel()
	pg := storagetest.New(t).Postgres
	zero, one := 0, 1
	for _, typ := range event.Types() {
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
	c := f.client(t, storage.Client{Name: "c"}, "s1")
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
