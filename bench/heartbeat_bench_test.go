package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

const (
	// hbFleet is how many sensors the heartbeat benchmarks track.
	hbFleet = 1_000_000
	// hbExpired is how many of them a sweep finds past their deadline.
	hbExpired = 10_000
	// hbBatch is how many distinct sensors one consumer batch reports.
	hbBatch = 500
)

// BenchmarkHeartbeat measures the heartbeat's Redis side with 1,000,000 tracked
// sensors in a real Redis (a private key prefix):
//
//   - Sightings: Tracker.Record of a batch of 500 distinct sensors, coalescing off so
//     every sensor is written; reports µs per sensor and the Redis round trips per
//     batch (counted by a TCP proxy between the client and Redis).
//   - Sweep: Daemon.Sweep finding 10,000 expired sensors among the 1,000,000, claiming
//     them in chunks of 1,000, handing them to a publisher that keeps nothing, and
//     confirming them; reports ms per sweep.
//
// Each also reports Redis memory per entry (MEMORY USAGE, every element sampled): of
// the deadlines sorted set per tracked sensor, and of the lost hash per lost sensor.
//
//	go test -run '^$' -bench Heartbeat -benchtime 20x ./bench/
func BenchmarkHeartbeat(b *testing.B) {
	ctx := context.Background()
	stores := storagetest.New(b)
	hb := heartbeat.NewStores(stores.Postgres, stores.Redis, stores.ClickHouse)
	raw := rawRedis(b, stores.RedisURL)
	base := time.Now().UTC().Truncate(time.Second)
	clock := &benchClock{now: base}
	cfg := heartbeat.Config{CoalesceFraction: -1, Now: clock.Now}

	// The fleet: deadlines spread over the next hour.
	fleet := make([]heartbeat.Deadline, hbFleet)
	for i := range fleet {
		fleet[i] = heartbeat.Deadline{
			SensorID: sensorID(i),
			Deadline: base.Add(time.Hour + time.Duration(i%3600)*time.Second),
		}
	}
	loadStart := time.Now()
	for start := 0; start < len(fleet); start += 50_000 {
		if _, err := hb.Redis.LoadHeartbeatDeadlines(ctx, fleet[start:start+50_000]); err != nil {
			b.Fatal(err)
		}
	}
	if err := hb.Redis.SetHeartbeatMarker(ctx, base); err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded %d deadlines in %s", len(fleet), time.Since(loadStart).Round(time.Millisecond))
	assertTracked(b, hb.Redis, hbFleet)

	b.Run("Sightings", func(b *testing.B) {
		tracker, err := heartbeat.NewTracker(cfg, hb.Redis, hb.Postgres, prometheus.NewRegistry(), discardLogger())
		if err != nil {
			b.Fatal(err)
		}
		next := 0
		batch := func() map[string]time.Time {
			clock.Add(time.Millisecond) // every batch is newer: each deadline moves
			seen := make(map[string]time.Time, hbBatch)
			for range hbBatch {
				seen[sensorID(next%hbFleet)] = clock.Now()
				next++
			}
			return seen
		}
		for b.Loop() {
			if _, err := tracker.Record(ctx, batch()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*hbBatch), "µs/sensor")

		// Round trips, through a counting proxy, on a tracker of its own.
		proxy := newCountingProxy(b, raw.Options().Addr)
		viaProxy, err := storage.OpenRedis(ctx, "redis://"+proxy.addr+"/0", stores.RedisPrefix)
		if err != nil {
			b.Fatal(err)
		}
		defer viaProxy.Close()
		counted, err := heartbeat.NewTracker(cfg, heartbeat.NewRedisStore(viaProxy), hb.Postgres, prometheus.NewRegistry(), discardLogger())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := counted.Record(ctx, batch()); err != nil { // warm-up: dial, timeouts
			b.Fatal(err)
		}
		const batches = 20
		before := proxy.roundTrips.Load()
		for range batches {
			if _, err := counted.Record(ctx, batch()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(proxy.roundTrips.Load()-before)/batches, "round-trips/batch")
		assertTracked(b, hb.Redis, hbFleet)
		reportMemory(b, raw, stores.RedisPrefix+"{heartbeat}:deadlines", hbFleet, "B/tracked-sensor")
	})

	b.Run("Sweep", func(b *testing.B) {
		pub := &countingPublisher{}
		d, err := heartbeat.New(cfg, heartbeat.Deps{
			Store: hb.Redis, Registry: hb.Postgres, History: hb.ClickHouse, Publisher: pub,
		}, prometheus.NewRegistry(), discardLogger())
		if err != nil {
			b.Fatal(err)
		}
		deadlines := stores.RedisPrefix + "{heartbeat}:deadlines"
		lost := stores.RedisPrefix + "{heartbeat}:lost"
		for b.Loop() {
			// Setup, untimed: force the deadlines of 10,000 sensors spread over the
			// fleet into the past (plain ZADD: the heartbeat's own writes only move
			// deadlines forward) and end their previous loss.
			b.StopTimer()
			clock.Add(time.Second)
			due := clock.Now().UnixMilli()
			if _, err := raw.Pipelined(ctx, func(p redis.Pipeliner) error {
				for j := range hbExpired {
					id := sensorID(j * (hbFleet / hbExpired))
					p.ZAdd(ctx, deadlines, redis.Z{Score: float64(due), Member: id})
					p.HDel(ctx, lost, id)
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			clock.Add(time.Second)
			pub.n.Store(0)
			b.StartTimer()

			if err := d.Sweep(ctx); err != nil {
				b.Fatal(err)
			}

			b.StopTimer()
			if got := pub.n.Load(); got != hbExpired {
				b.Fatalf("sweep published %d losses, want %d", got, hbExpired)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/sweep")
		assertTracked(b, hb.Redis, hbFleet-hbExpired)
		reportMemory(b, raw, lost, hbExpired, "B/lost-sensor")
	})
}

// reportMemory reports MEMORY USAGE (every element sampled) of key per entry.
func reportMemory(b *testing.B, raw *redis.Client, key string, entries int64, unit string) {
	b.Helper()
	bytes, err := raw.MemoryUsage(context.Background(), key, 0).Result()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(bytes)/float64(entries), unit)
}

// sensorID names fleet sensor i like a real id: 16 characters at most.
func sensorID(i int) string { return fmt.Sprintf("bench%07d", i) }

func assertTracked(b *testing.B, r *heartbeat.RedisStore, want int64) {
	b.Helper()
	tracked, _, err := r.CountHeartbeats(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if tracked != want {
		b.Fatalf("tracked = %d, want %d", tracked, want)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func rawRedis(b *testing.B, url string) *redis.Client {
	b.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	client := redis.NewClient(opts)
	b.Cleanup(func() { _ = client.Close() })
	return client
}

// benchClock is the heartbeat's clock in the benchmarks: moved by hand so deadlines
// expire on cue.
type benchClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *benchClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *benchClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// countingPublisher stands in for Kafka: the sweep benchmark measures Redis, and a
// real producer's latency would hide it.
type countingPublisher struct{ n atomic.Int64 }

func (p *countingPublisher) Publish(_ context.Context, events []event.Event) error {
	p.n.Add(int64(len(events)))
	return nil
}

// countingProxy forwards TCP to Redis and counts round trips: a burst of bytes from
// the client after the server has answered (or at the start) begins a new one, so a
// pipeline is one round trip however many commands it holds.
type countingProxy struct {
	addr       string
	roundTrips atomic.Int64
}

func newCountingProxy(b *testing.B, target string) *countingProxy {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	p := &countingProxy{addr: ln.Addr().String()}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	b.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, server)
			mu.Unlock()
			var awaiting atomic.Bool
			wg.Go(func() {
				defer server.Close()
				pipe(client, server, func() {
					if awaiting.CompareAndSwap(false, true) {
						p.roundTrips.Add(1)
					}
				})
			})
			wg.Go(func() {
				defer client.Close()
				pipe(server, client, func() { awaiting.Store(false) })
			})
		}
	})
	return p
}

// pipe copies from src to dst, calling onData before forwarding each read.
func pipe(src, dst net.Conn, onData func()) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			onData()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
