package webhook_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// A rotated secret keeps signing, next to the new one, until its overlap ends: a
// webhook sent meanwhile verifies with the old secret and with the new one; one
// sent after the overlap only with the new one. The secrets go the whole way: stored
// encrypted, read back with the delivery's target, and signed with.
func TestRotationSignsWithBothSecretsDuringOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := storagetest.New(t).Postgres
	if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: "door1", Address: "Main St 1"}); err != nil {
		t.Fatal(err)
	}
	oldSecret, newSecret := webhook.NewSecret(), webhook.NewSecret()
	c, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "c", WebhookURL: "https://example.com/hook", Secret: oldSecret})
	if err != nil {
		t.Fatal(err)
	}
	if err := registry.New(pg).LinkSensor(ctx, c.ID, "door1"); err != nil {
		t.Fatal(err)
	}
	data, previous := 1, 0
	if _, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, []storage.NotificationInput{{EventID: "e1", Type: "state_changed",
		SensorID: "door1", Data: &data, Previous: &previous, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	deliveries, err := pg.ListClientDeliveries(ctx, c.ID, storage.DeliveryFilter{}, storage.Page{Limit: 10})
	if err != nil || len(deliveries) != 1 || deliveries[0].Channel != storage.ChannelWebhook {
		t.Fatalf("webhook deliveries = %v, %v", deliveries, err)
	}

	overlapEnds := time.Now().Add(24 * time.Hour)
	if _, err := registry.New(pg).RotateClientSecret(ctx, c.ID, newSecret, overlapEnds); err != nil {
		t.Fatal(err)
	}
	tg, err := pg.DeliveryTarget(ctx, deliveries[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Secret != newSecret || tg.PreviousSecret != oldSecret || !tg.PreviousSecretUntil.Equal(overlapEnds.Truncate(time.Microsecond)) {
		t.Fatalf("target after rotation: secret new %v, previous old %v, until %v (want %v)",
			tg.Secret == newSecret, tg.PreviousSecret == oldSecret, tg.PreviousSecretUntil, overlapEnds)
	}
	target := webhook.Target{URL: "", Secret: tg.Secret, PreviousSecret: tg.PreviousSecret,
		PreviousSecretUntil: tg.PreviousSecretUntil}

	srv, got := recordingServer(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	target.URL = srv.URL
	for _, tc := range []struct {
		name string
		at   time.Time
		// verifies tells, per secret, whether the webhook verifies with it.
		verifies map[string]bool
	}{
		{"during the overlap", time.Now(), map[string]bool{oldSecret: true, newSecret: true}},
		{"an hour before it ends", overlapEnds.Add(-time.Hour), map[string]bool{oldSecret: true, newSecret: true}},
		{"after it", overlapEnds.Add(time.Second), map[string]bool{oldSecret: false, newSecret: true}},
	} {
		s := newSender(t, webhook.Config{AllowPrivate: true, Now: func() time.Time { return tc.at }})
		if res := s.Send(ctx, target, testNotification()); res.Outcome != notifier.Sent {
			t.Fatalf("%s: %+v", tc.name, res)
		}
		req := <-got
		// The sender's clock may be a day ahead: the tolerance covers it.
		tolerance := time.Until(tc.at).Abs() + time.Minute
		signers := 0
		for secret, want := range tc.verifies {
			err := webhook.Verify(secret, req.header, req.body, tolerance)
			if (err == nil) != want {
				name := "old"
				if secret == newSecret {
					name = "new"
				}
				t.Errorf("%s: verifying with the %s secret: %v (signatures %q)", tc.name, name, err, req.header.Get("webhook-signature"))
			}
			if want {
				signers++
			}
		}
		if n := len(strings.Fields(req.header.Get("webhook-signature"))); n != signers {
			t.Errorf("%s: %d signatures, want %d", tc.name, n, signers)
		}
	}

	// A rotation without overlap drops the previous secret at once.
	if _, err := registry.New(pg).RotateClientSecret(ctx, c.ID, webhook.NewSecret(), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if tg, err := pg.DeliveryTarget(ctx, deliveries[0].ID); err != nil || tg.PreviousSecret != "" || !tg.PreviousSecretUntil.IsZero() {
		t.Fatalf("after a rotation without overlap: previous kept %v until %v, err %v", tg.PreviousSecret != "", tg.PreviousSecretUntil, err)
	}
}
