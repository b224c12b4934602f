package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/lockstream/lockstream/bench"
	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream/streamtest"
)

func TestIngest(t *testing.T) {
	t.Parallel()
	for _, cold := range []bool{false, true} {
		name := map[bool]string{false: "seeded", true: "cold start"}[cold]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stores := storagetest.New(t)
			cfg := bench.IngestConfig{Readings: 3000, Sensors: 300, ChangeRate: 0.1, ColdStart: cold,
				History: history.NewClickHouseStore(stores.ClickHouse)}
			cfg.Stream.Brokers = streamtest.Cluster(t)
			cfg.Stream.Partitions = 4
			var out bytes.Buffer
			res, err := bench.Ingest(context.Background(), cfg, bench.NewPostgresStore(stores.Postgres),
				slog.New(slog.NewTextHandler(io.Discard, nil)), &out)
			if err != nil {
				t.Fatal(err)
			}
			// The full consumer found exactly the changes that were produced: on a
			// cold start every sensor's first reading and about a tenth of the
			// rest; seeded, about a tenth of all.
			if res.Changes != res.ExpectedChanges {
				t.Fatalf("consumer found %d changes, %d were produced", res.Changes, res.ExpectedChanges)
			}
			low, high := 150, 450
			if cold {
				low, high = 300+120, 300+420
			}
			if res.ExpectedChanges < low || res.ExpectedChanges > high {
				t.Fatalf("%d changes produced, want %d to %d", res.ExpectedChanges, low, high)
			}
			if res.BareRate <= 0 || res.FullRate <= 0 || res.Ratio <= 0 || res.HistoryRate <= 0 {
				t.Fatalf("rates not measured: %+v", res)
			}
			// Every run registers its sensors (readings of unregistered ids are
			// history only); only a warm run also stores their previous states.
			if res.SeedSeconds <= 0 {
				t.Fatalf("seeded for %vs on a run with ColdStart %v, want the registration timed", res.SeedSeconds, cold)
			}
			var printed bench.IngestResult
			if err := json.Unmarshal(out.Bytes(), &printed); err != nil || printed != res {
				t.Fatalf("printed %q (%v), want the result %+v", out.String(), err, res)
			}
			states, err := consumer.NewPostgresStore(stores.Postgres).LookupSensors(context.Background(), []string{bench.BenchSensorID(0), bench.BenchSensorID(299)})
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range states {
				if l.State == nil {
					t.Errorf("sensor %s has no state after the benchmark", l.SensorID)
				}
			}
			// History holds every reading and every event, once.
			if res.HistoryRows != res.Readings+res.Changes {
				t.Fatalf("history writer stored %d rows, want %d readings and %d events", res.HistoryRows, res.Readings, res.Changes)
			}
			readings := storagetest.AllReadings(t, stores.ClickHouseURL)
			events := storagetest.AllEvents(t, stores.ClickHouseURL)
			if len(readings) != res.Readings || len(events) != res.Changes {
				t.Fatalf("ClickHouse holds %d readings and %d events, want %d and %d",
					len(readings), len(events), res.Readings, res.Changes)
			}
		})
	}
}
