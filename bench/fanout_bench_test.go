package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// Fan-out throughput with and without subscriptions (issue 17): the fan-out's
// statement (fanout.PostgresStore.CreateNotifications) for batches of 1,000 events,
// each event's sensor watched by fanoutClients clients.
const (
	fanoutSensors = 1000
	fanoutClients = 5
	fanoutBatch   = 1000
)

// fanoutModes are the subscriptions of the benchmark's clients, by mode:
//   - off: every client takes every type (event_types NULL, as before issue 17);
//   - on-all-pass: every client subscribed to both types (the filter runs, drops nothing);
//   - on-filtering: 2 of the 5 clients subscribed to connection_lost only.
var fanoutModes = []string{"off", "on-all-pass", "on-filtering"}

func fanoutSubscriptions(mode string, client int) []string {
	switch {
	case mode == "on-all-pass":
		return []string{"state_changed", "connection_lost"}
	case mode == "on-filtering" && client < 2:
		return []string{"connection_lost"}
	}
	return nil
}

// BenchmarkFanoutSubscriptions writes, b.N times, one batch of fanoutBatch
// events (state_changed and connection_lost alternating per sensor) through the
// fan-out's statement for each mode in turn, on one store: before each batch
// (untimed) the clients' subscriptions are set to the mode's, so the modes share
// the data, the table sizes and the machine's load. It reports each mode's
// events per second.
func BenchmarkFanoutSubscriptions(b *testing.B) {
	ctx := context.Background()
	pg, clients := seedFanout(b)
	elapsed := map[string]time.Duration{}
	next := 0 // orders every batch in time
	b.ResetTimer()
	for n := range b.N {
		for i := range fanoutModes {
			mode := fanoutModes[(n+i)%len(fanoutModes)]
			b.StopTimer()
			for c, id := range clients {
				types := fanoutSubscriptions(mode, c)
				if _, err := registry.New(pg).UpdateClient(ctx, id, registry.ClientUpdate{EventTypes: &types}); err != nil {
					b.Fatal(err)
				}
			}
			// The n-th batch of each mode has the same content (types, states).
			events := fanoutEvents(mode, n, next)
			next++
			b.StartTimer()
			start := time.Now()
			if _, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, events); err != nil {
				b.Fatal(err)
			}
			elapsed[mode] += time.Since(start)
		}
	}
	for _, mode := range fanoutModes {
		b.ReportMetric(float64(b.N*fanoutBatch)/elapsed[mode].Seconds(), mode+"-events/s")
	}
}

// seedFanout makes the sensors and clients, each client watching every sensor,
// and writes one untimed batch to warm the plan cache and the tables up.
func seedFanout(b *testing.B) (*storage.Postgres, []string) {
	ctx := context.Background()
	pg := storagetest.New(b).Postgres
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range fanoutSensors {
		g.Go(func() error {
			_, err := registry.New(pg).CreateSensor(gctx, registry.Sensor{ID: fanoutSensor(i), Address: "bench street"})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	clients := make([]string, fanoutClients)
	for c := range clients {
		created, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: fmt.Sprintf("bench%d", c),
			WebhookURL: "https://example.com/hook", Secret: webhook.NewSecret()})
		if err != nil {
			b.Fatal(err)
		}
		clients[c] = created.ID
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(16)
		for i := range fanoutSensors {
			g.Go(func() error { return registry.New(pg).LinkSensor(gctx, created.ID, fanoutSensor(i)) })
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, fanoutEvents("warm", -1, -1)); err != nil {
		b.Fatal(err)
	}
	return pg, clients
}

func fanoutSensor(i int) string { return fmt.Sprintf("fan%05d", i) }

// fanoutEvents is a mode's batch n: one event per sensor, state_changed or
// connection_lost alternating, the content a function of n alone; seq puts it
// after every earlier batch in time.
func fanoutEvents(mode string, n, seq int) []storage.NotificationInput {
	t0 := time.Now().Add(-time.Hour)
	events := make([]storage.NotificationInput, fanoutBatch)
	for i := range events {
		at := t0.Add(time.Duration((seq+1)*fanoutBatch+i) * time.Millisecond)
		events[i] = storage.NotificationInput{EventID: fmt.Sprintf("fan-%s-%d-%d", mode, n, i), SensorID: fanoutSensor(i % fanoutSensors),
			At: at, Type: "connection_lost"}
		if (n+i)%2 == 0 {
			d := ((n + 2) / 2) % 2
			p := 1 - d
			events[i].Type, events[i].Data, events[i].Previous = "state_changed", &d, &p
		}
	}
	return events
}
