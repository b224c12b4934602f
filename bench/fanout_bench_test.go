package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// Fan-out throughput with and without subscriptions (issue 17): the fan-out's
// statement (storage.Postgres.CreateNotifications) for batches of 1,000 events,
// each event's sensor watched by fanoutClients clients.
const (
	fanoutSensors = 1000
	fanoutClients = 5
	fanoutBatch   = 1000
)

// BenchmarkFanoutSubscriptions writes b.N batches of fanoutBatch events
// (state_changed and connection_lost alternating per sensor) through the
// fan-out's statement and reports events and notifications per second:
//   - off: every client takes every type (event_types NULL, as before issue 17);
//   - on-all-pass: every client subscribed to both types (the filter runs, drops nothing);
//   - on-filtering: 2 of the 5 clients subscribed to connection_lost only.
func BenchmarkFanoutSubscriptions(b *testing.B) {
	for _, mode := range []string{"off", "on-all-pass", "on-filtering"} {
		b.Run(mode, func(b *testing.B) { benchFanout(b, mode) })
	}
}

func benchFanout(b *testing.B, mode string) {
	ctx := context.Background()
	pg := storagetest.New(b).Postgres
	sensors := make([]string, fanoutSensors)
	for i := range sensors {
		sensors[i] = fmt.Sprintf("fan%05d", i)
		if _, err := pg.CreateSensor(ctx, storage.Sensor{ID: sensors[i], Address: "bench street"}); err != nil {
			b.Fatal(err)
		}
	}
	for c := range fanoutClients {
		client := storage.Client{Name: fmt.Sprintf("bench%d", c), WebhookURL: "https://example.com/hook", Secret: webhook.NewSecret()}
		switch {
		case mode == "on-all-pass":
			client.EventTypes = []string{"state_changed", "connection_lost"}
		case mode == "on-filtering" && c < 2:
			client.EventTypes = []string{"connection_lost"}
		}
		created, err := pg.CreateClient(ctx, client)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range sensors {
			if err := pg.LinkSensor(ctx, created.ID, s); err != nil {
				b.Fatal(err)
			}
		}
	}
	t0 := time.Now().Add(-time.Hour)
	batch := func(n int) []storage.NotificationInput {
		events := make([]storage.NotificationInput, fanoutBatch)
		for i := range events {
			at := t0.Add(time.Duration(n*fanoutBatch+i) * time.Millisecond)
			s := sensors[(n*fanoutBatch+i)%fanoutSensors]
			events[i] = storage.NotificationInput{EventID: fmt.Sprintf("%s-%d-%d", mode, n, i), SensorID: s, At: at, Type: "connection_lost"}
			if (n+i)%2 == 0 {
				d, p := (n/2)%2, 1-(n/2)%2
				events[i].Type, events[i].Data, events[i].Previous = "state_changed", &d, &p
			}
		}
		return events
	}
	// One untimed batch warms the plan cache and the tables up.
	if _, err := pg.CreateNotifications(ctx, batch(-1)); err != nil {
		b.Fatal(err)
	}
	notifications := 0
	b.ResetTimer()
	start := time.Now()
	for n := range b.N {
		created, err := pg.CreateNotifications(ctx, batch(n))
		if err != nil {
			b.Fatal(err)
		}
		notifications += created.Notifications
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N*fanoutBatch)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(notifications)/elapsed.Seconds(), "notifications/s")
}
