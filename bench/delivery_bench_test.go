package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

const (
	// deliveryBacklog is how many PENDING webhook deliveries the throughput
	// benchmark seeds per run.
	deliveryBacklog = 20_000
	// deliveryWorkers is the retrier's worker pool (default 64), and the
	// per-endpoint concurrency of the webhook sender: every delivery goes to one
	// client's one endpoint, whose default limit (4) would measure the limit, not
	// the retrier. More workers mean fuller claims: a claim takes only as many
	// deliveries as there are free workers.
	deliveryWorkers = 256
	// deliveryBatch is the most deliveries one claim takes and one write records.
	deliveryBatch = 200
	// latencyRate is the events per second the latency benchmark produces.
	latencyRate = 1000
	// latencyDuration is how long it produces them.
	latencyDuration = 20 * time.Second
	// latencySensors is how many sensors the events spread over.
	latencySensors = 2000
)

// okSink answers every webhook 204 at once and hands the parsed body to seen.
func okSink(b *testing.B, seen func(webhook.Body, time.Time)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		raw, err := io.ReadAll(r.Body)
		if err == nil && seen != nil {
			var body webhook.Body
			if json.Unmarshal(raw, &body) == nil {
				seen(body, now)
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// seedWatcher creates one client with the sink's URL watching sensors named
// prefix0…prefix(n-1), creating them; it returns the client's id and the sensors.
func seedWatcher(ctx context.Context, b *testing.B, pg *storage.Postgres, url, prefix string, n int) (string, []string) {
	client, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "bench", WebhookURL: url, Secret: webhook.NewSecret()})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%06d", prefix, i)
		g.Go(func() error {
			if _, err := registry.New(pg).CreateSensor(gctx, registry.Sensor{ID: ids[i], Address: "bench street"}); err != nil {
				return err
			}
			return registry.New(pg).LinkSensor(gctx, client.ID, ids[i])
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatalf("seeding sensors: %v", err)
	}
	return client.ID, ids
}

// timedStore is the outbox with the time spent in each of the retrier's calls
// added up, to show where a run's time goes.
type timedStore struct {
	*storage.Postgres
	claims, targets, finishes   atomic.Int64 // calls
	claimNs, targetNs, finishNs atomic.Int64
	claimed                     atomic.Int64
}

func (s *timedStore) ClaimDeliveries(ctx context.Context, now time.Time, limit int, lease time.Duration, channels ...storage.Channel) ([]storage.Delivery, error) {
	start := time.Now()
	d, err := s.Postgres.ClaimDeliveries(ctx, now, limit, lease, channels...)
	s.claimNs.Add(int64(time.Since(start)))
	s.claims.Add(1)
	s.claimed.Add(int64(len(d)))
	return d, err
}

func (s *timedStore) DeliveryTargets(ctx context.Context, claimed []storage.Delivery) (map[string]storage.DeliveryTarget, error) {
	start := time.Now()
	t, err := s.Postgres.DeliveryTargets(ctx, claimed)
	s.targetNs.Add(int64(time.Since(start)))
	s.targets.Add(1)
	return t, err
}

func (s *timedStore) FinishDeliveries(ctx context.Context, f []storage.DeliveryFinish) ([]storage.FinishedDelivery, error) {
	start := time.Now()
	d, err := s.Postgres.FinishDeliveries(ctx, f)
	s.finishNs.Add(int64(time.Since(start)))
	s.finishes.Add(1)
	return d, err
}

// report logs the calls and the mean time of each.
func (s *timedStore) report(b *testing.B) {
	mean := func(ns, n int64) time.Duration {
		if n == 0 {
			return 0
		}
		return time.Duration(ns / n)
	}
	b.Logf("claims: %d (%.1f deliveries each, mean %v); targets: %d (mean %v); finishes: %d (mean %v)",
		s.claims.Load(), float64(s.claimed.Load())/float64(max(s.claims.Load(), 1)), mean(s.claimNs.Load(), s.claims.Load()),
		s.targets.Load(), mean(s.targetNs.Load(), s.targets.Load()),
		s.finishes.Load(), mean(s.finishNs.Load(), s.finishes.Load()))
}

// newBenchRetrier returns a retrier with the real webhook sender, allowed to
// reach the loopback sink.
func newBenchRetrier(b *testing.B, store retrier.Store, stores *storagetest.Stores) *retrier.Retrier {
	sender, err := webhook.New(webhook.Config{AllowPrivate: true, PerEndpointConcurrency: deliveryWorkers}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sender.Close)
	r, err := retrier.New(retrier.Config{Workers: deliveryWorkers, BatchSize: deliveryBatch, BackoffBase: 100 * time.Millisecond},
		retrier.Deps{Store: store, Attempts: stores.ClickHouse, Webhook: sender},
		prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// runRetrier runs r until the returned stop is called, which waits for Run to
// return and fails the benchmark if it returned an error.
func runRetrier(b *testing.B, r *retrier.Retrier) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("retrier: %v", err)
		}
	}
}

// waitCount polls until count reaches want, failing after limit with the
// outbox's open deliveries by state.
func waitCount(b *testing.B, pg *storage.Postgres, what string, count func() int64, want int64, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for count() < want {
		if time.Now().After(deadline) {
			stats, err := pg.OutboxStats(context.Background(), time.Now())
			b.Fatalf("%s: %d of %d after %v; open deliveries %v (%v)", what, count(), want, limit, stats.Depth, err)
		}
		time.Sleep(time.Millisecond) // poll interval; the measurement is far longer
	}
}

// BenchmarkDeliveryThroughput measures how fast one retrier (256 workers, claims
// of up to 200) empties an outbox of 20,000 PENDING webhook deliveries into a loopback
// sink that answers 204 at once: one client, watching 20,000 sensors with one
// state_changed each (so no delivery waits behind an older one of its sensor),
// its endpoint's concurrency limit raised to the 256 workers. Each run seeds the
// backlog with CreateNotifications (untimed), then times from the start of the
// retrier until the sink got every delivery and the outbox has no open delivery
// left. Reports deliveries/s; attempts go to ClickHouse as in production.
//
//	go test -run '^$' -bench DeliveryThroughput -benchtime 1x ./bench/
func BenchmarkDeliveryThroughput(b *testing.B) {
	ctx := context.Background()
	stores := storagetest.New(b)
	var received atomic.Int64
	sink := okSink(b, func(webhook.Body, time.Time) { received.Add(1) })
	_, sensors := seedWatcher(ctx, b, stores.Postgres, sink.URL+"/hook", "thr", deliveryBacklog)

	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		received.Store(0)
		at := time.Now().UTC()
		inputs := make([]storage.NotificationInput, 0, len(sensors))
		for k, s := range sensors {
			data := (i + k) % 2
			inputs = append(inputs, storage.NotificationInput{
				EventID: fmt.Sprintf("thr-%d-%d-%d", at.UnixNano(), i, k), Type: string(event.StateChanged),
				SensorID: s, Data: &data, At: at,
			})
		}
		for chunk := range slices.Chunk(inputs, 1000) {
			if _, err := fanout.NewPostgresStore(stores.Postgres).CreateNotifications(ctx, chunk); err != nil {
				b.Fatal(err)
			}
		}
		// Production tables have statistics; a freshly filled one has none until
		// autovacuum's next look, and the claim is planned badly meanwhile (see
		// storagetest.AnalyzeOutbox).
		storagetest.AnalyzeOutbox(b, stores.PostgresURL)
		store := &timedStore{Postgres: stores.Postgres}
		r := newBenchRetrier(b, store, stores)
		b.StartTimer()

		start := time.Now()
		stop := runRetrier(b, r)
		waitCount(b, stores.Postgres, "webhooks received", received.Load, deliveryBacklog, 5*time.Minute)
		waitCount(b, stores.Postgres, "deliveries finished", func() int64 {
			stats, err := stores.Postgres.OutboxStats(ctx, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			var open int64
			for _, n := range stats.Depth {
				open += n
			}
			return deliveryBacklog - open
		}, deliveryBacklog, time.Minute)
		total += time.Since(start)
		b.StopTimer()
		stop()
		store.report(b)
		if got := received.Load(); got != deliveryBacklog {
			b.Fatalf("sink received %d webhooks, want %d (no duplicates)", got, deliveryBacklog)
		}
	}
	b.ReportMetric(float64(deliveryBacklog*b.N)/total.Seconds(), "deliveries/s")
}

// BenchmarkDeliveryLatency measures event-to-webhook latency at a steady load:
// 1,000 state_changed events per second for 20 s, spread over 2,000 sensors
// watched by one client, produced to lockstream.events on a kfake broker (3
// partitions) with At = the moment of producing; a Fanout and a Retrier (256
// workers) deliver them to a loopback sink that answers 204 at once and records
// its receive time − At. Reports the p50, p99 and max in ms.
//
//	go test -run '^$' -bench DeliveryLatency -benchtime 1x ./bench/
func BenchmarkDeliveryLatency(b *testing.B) {
	ctx := context.Background()
	stores := storagetest.New(b)
	kafka := streamtest.Config(b, 3)
	var (
		mu        sync.Mutex
		latencies []time.Duration
	)
	sink := okSink(b, func(body webhook.Body, now time.Time) {
		mu.Lock()
		latencies = append(latencies, now.Sub(body.At))
		mu.Unlock()
	})
	clientID, sensors := seedWatcher(ctx, b, stores.Postgres, sink.URL+"/hook", "lat", latencySensors)
	producer := streamtest.Client(b, kafka)
	publisher := stream.NewEventPublisher(kafka, producer)

	fanReg := prometheus.NewRegistry()
	fan, err := fanout.New(fanout.Config{Stream: kafka}, fanout.NewPostgresStore(stores.Postgres), fanReg,
		slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	fanCtx, stopFan := context.WithCancel(ctx)
	fanDone := make(chan error, 1)
	go func() { fanDone <- fan.Run(fanCtx) }()
	defer func() {
		stopFan()
		if err := <-fanDone; err != nil {
			b.Errorf("fanout: %v", err)
		}
	}()
	stopRetrier := runRetrier(b, newBenchRetrier(b, stores.Postgres, stores))
	defer stopRetrier()

	var (
		all      []time.Duration
		produced int
		busy     time.Duration
	)
	for i := 0; i < b.N; i++ {
		mu.Lock()
		latencies = latencies[:0]
		mu.Unlock()
		// One batch of events every 10 ms: 10 events, so 1,000/s.
		const tick = 10 * time.Millisecond
		perTick := latencyRate * int(tick) / int(time.Second)
		ticker := time.NewTicker(tick)
		sent := 0
		began := time.Now()
		for end := time.Now().Add(latencyDuration); time.Now().Before(end); {
			<-ticker.C
			now := time.Now().UTC()
			batch := make([]event.Event, perTick)
			for k := range batch {
				data, prev := (sent/len(sensors)+i)%2, (sent/len(sensors)+i+1)%2
				batch[k] = event.Event{
					ID: fmt.Sprintf("lat-%d-%d", now.UnixNano(), k), Type: event.StateChanged,
					SensorID: sensors[sent%len(sensors)], Data: &data, Previous: &prev, At: now,
				}
				sent++
			}
			if err := publisher.Publish(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
		ticker.Stop()
		produced += sent
		busy += time.Since(began)
		// A sensor's next event comes 2 s after its last, so none is superseded
		// unless delivery lags that far. The run ends when the fan-out has
		// written every event's deliveries (it counts events after their
		// rows) and none is open any more: every webhook then arrived (the
		// sink answers before the retrier records SENT), and the events that
		// did not were superseded.
		received := func() int64 {
			mu.Lock()
			defer mu.Unlock()
			return int64(len(latencies))
		}
		deadline := time.Now().Add(2 * time.Minute) // a stalled run fails instead of hanging
		for {
			fanned, err := counters(fanReg, "lockstream_fanout_events_total")
			if err != nil {
				b.Fatal(err)
			}
			stats, err := stores.Postgres.OutboxStats(ctx, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			open := int64(0)
			for _, n := range stats.Depth {
				open += n
			}
			if int(fanned[0]) >= produced && open == 0 {
				if got := received(); got < int64(sent) {
					b.Logf("%d of %d events not delivered (superseded while delivery lagged)", int64(sent)-got, sent)
				}
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("after 2m: the fan-out wrote %v of %d events, the sink got %d of %d webhooks; open deliveries %v",
					fanned[0], produced, received(), sent, stats.Depth)
			}
			time.Sleep(100 * time.Millisecond) // poll interval
		}
		mu.Lock()
		all = append(all, latencies...)
		mu.Unlock()
	}
	logStages(ctx, b, stores.Postgres, clientID)
	pct := percentiles(all)
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(1), "max-ms")
	b.ReportMetric(float64(len(all)/b.N), "webhooks/run")
	// The rate reached: a loaded machine's ticker may fall behind 1,000/s.
	b.ReportMetric(float64(produced)/busy.Seconds(), "events/s")
}

// percentiles sorts ds and returns a function from a fraction (0…1) to the
// duration at it, in ms.
func percentiles(ds []time.Duration) func(float64) float64 {
	slices.Sort(ds)
	return func(p float64) float64 {
		if len(ds) == 0 {
			return 0
		}
		return float64(ds[int(p*float64(len(ds)-1))]) / float64(time.Millisecond)
	}
}

// logStages splits the latency of the client's SENT deliveries in two from the
// outbox's timestamps: event → delivery row (Kafka and the fan-out) and delivery
// row → SENT recorded (the retrier's poll, claim, send and finish write).
func logStages(ctx context.Context, b *testing.B, pg *storage.Postgres, clientID string) {
	var fanout, deliver []time.Duration
	page := storage.Page{Limit: 1000}
	for {
		ds, err := pg.ListClientDeliveries(ctx, clientID, storage.DeliveryFilter{State: storage.DeliverySent}, page)
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range ds {
			fanout = append(fanout, d.CreatedAt.Sub(d.EventAt))
			deliver = append(deliver, d.UpdatedAt.Sub(d.CreatedAt))
		}
		if len(ds) < page.Limit {
			break
		}
		page.After = ds[len(ds)-1].ID
	}
	f, d := percentiles(fanout), percentiles(deliver)
	b.Logf("%d SENT: event → delivery row p50 %.1f ms p99 %.1f ms; delivery row → SENT recorded p50 %.1f ms p99 %.1f ms",
		len(fanout), f(0.5), f(0.99), d(0.5), d(0.99))
}
