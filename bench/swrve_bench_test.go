package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/swrve"
	"github.com/lockstream/lockstream/notifier/swrve/swrvetest"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
)

// swrveRampUp is how long after the first request the benchmark starts
// counting completions: past Swrve's slowest measured answer (7.7 s), so the
// answers arrive at the rate the requests start.
const swrveRampUp = 8 * time.Second

// BenchmarkSwrveThroughput sends b.N pushes through a Sender with the default
// limits (300 a second, a pool of 600) to the fake Swrve with the measured
// latency distribution unscaled (p50 983 ms, max 7.7 s) and Swrve's limit of
// 300 starts a second. 700 dispatcher workers call Send, more than the pool,
// so sends wait for slots as they would in the retrier; a push answered 429
// is sent again at once (the limiter paces it), as a retrier would later.
//
// It reports sends/s, the sustained rate: pushes answered 200 from 8 s after
// the first request reached the fake until the last one reached it, divided
// by that time, leaving out the ramp-up and the drain of the slowest answers.
// Also: starts/s at the fake over the whole run, the overall rate (b.N over
// the whole run, ramp-up and drain included), the fake's 429s, the most
// requests it saw at once and the most it saw start within one second.
// It needs a run of well over 8 s: -bench SwrveThroughput -benchtime 6000x.
func BenchmarkSwrveThroughput(b *testing.B) {
	benchSwrveThroughput(b, 1, nil)
}

// BenchmarkSwrveThroughputShared is BenchmarkSwrveThroughput with two Senders
// (two retrier processes, as Swrve sees them) sharing the default rate of 300
// a second through Redis (Config.Redis), 350 workers each: together they must
// keep Swrve's limit, and sends/s says what the shared turns cost against
// one Sender's pace. -bench SwrveThroughputShared -benchtime 6000x.
func BenchmarkSwrveThroughputShared(b *testing.B) {
	rdb, err := storage.OpenRedis(context.Background(), storagetest.RedisURL(b), storagetest.NewRedisPrefix(b))
	if err != nil {
		b.Fatal(err)
	}
	defer rdb.Close()
	benchSwrveThroughput(b, 2, rdb)
}

// benchSwrveThroughput runs the Swrve benchmarks: senders Senders (sharing
// their rate through rdb when it is not nil) and 700 workers in all.
func benchSwrveThroughput(b *testing.B, senders int, rdb *storage.Redis) {
	const workers = 700
	var arrivals, answered stamps
	fake := swrvetest.NewServer(swrvetest.Config{Scale: 1, MaxPerSecond: 300, Seed: 42,
		Observe: func(swrvetest.Request) { arrivals.add() },
	})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	pool := make([]*swrve.Sender, senders)
	for i := range pool {
		sender, err := swrve.New(swrve.Config{
			URL:      srv.URL,
			PushKeys: swrve.PushKeys{"Hello": {storage.PlatformIOS: "campaign"}},
			Redis:    rdb,
		}, prometheus.NewRegistry(), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer sender.Close()
		pool[i] = sender
	}
	push := swrve.Push{Platform: storage.PlatformIOS, MessagePrototypeKey: "Hello", PushKey: "device", Message: "hi"}

	ctx := context.Background()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range workers {
		sender := pool[w%senders]
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				for {
					res := sender.Send(ctx, push)
					if res.Outcome == notifier.Sent {
						break
					}
					if res.HTTPStatus != 429 {
						if failed.Add(1) <= 3 {
							b.Logf("not sent: %+v", res)
						}
						break
					}
				}
				answered.add()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()

	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d pushes not sent", n, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "overall_sends/s")
	reportSwrveRun(b, fake.Stats(), arrivals.sorted(), answered.sorted())
}

// stamps collects the times of something many goroutines report.
type stamps struct {
	mu    sync.Mutex
	times []time.Time
}

// add records that it happened now.
func (s *stamps) add() {
	now := time.Now()
	s.mu.Lock()
	s.times = append(s.times, now)
	s.mu.Unlock()
}

// count returns how many times it happened.
func (s *stamps) count() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.times))
}

// sorted returns the times recorded, in order.
func (s *stamps) sorted() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.SortedFunc(slices.Values(s.times), time.Time.Compare)
}

// reportSwrveRun reports what the fake Swrve saw of a run (429s, the most
// requests at once and starting within one second), the rate requests started
// at (arrivals, the times they reached the fake, in order), and sends/s: the pushes
// answered 200 (at the times in answered) from swrveRampUp after the first
// arrival until the last one, divided by that time.
func reportSwrveRun(b *testing.B, st swrvetest.Stats, arrivals, answered []time.Time) {
	b.ReportMetric(float64(st.TooMany), "429s")
	b.ReportMetric(float64(st.MaxConcurrent), "max_in_flight")
	b.ReportMetric(float64(st.MaxPerSecond), "max_starts_in_1s")
	first, last := arrivals[0], arrivals[len(arrivals)-1]
	if last.Sub(first) > 0 {
		b.ReportMetric(float64(len(arrivals)-1)/last.Sub(first).Seconds(), "starts/s")
	}
	from := first.Add(swrveRampUp)
	if last.Sub(from) < 2*time.Second {
		b.Logf("run too short for sends/s (%s of starts); use -benchtime 6000x", last.Sub(first))
		return
	}
	n := 0
	for _, t := range answered {
		if !t.Before(from) && !t.After(last) {
			n++
		}
	}
	b.ReportMetric(float64(n)/last.Sub(from).Seconds(), "sends/s")
}

// BenchmarkPushPipeline is the whole push path with Swrve's real latency:
// 20 callers POST /push b.N pushes to the API (each durable in Postgres
// before its 200), and a retrier with the default Swrve limits (300 a second,
// a pool of 600, as many push workers) sends them to the fake Swrve with the
// measured latency distribution unscaled and Swrve's limit of 300 starts a
// second. A push answered 429 is retried after Swrve's Retry-After (1 s).
//
// It reports sends/s, the sustained rate: pushes answered 200 from 8 s after
// the first request reached the fake until the last one reached it, divided
// by that time. Also: the overall rate (b.N over the whole run), posts/s, starts/s, the
// fake's 429s, the most requests it saw at once and the most it saw start
// within one second. Run it with -benchtime 6000x or more.
func BenchmarkPushPipeline(b *testing.B) {
	const callers = 20
	stores := storagetest.New(b)
	var arrivals, answered stamps
	fake := swrvetest.NewServer(swrvetest.Config{Scale: 1, MaxPerSecond: 300, Seed: 7,
		Observe: func(swrvetest.Request) { arrivals.add() },
		Answered: func(_ swrvetest.Request, status int) {
			if status == http.StatusOK {
				answered.add()
			}
		},
	})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	sender, err := swrve.New(swrve.Config{URL: srv.URL, PushKeys: swrve.PushKeys{"Hello": {storage.PlatformIOS: "campaign"}}},
		prometheus.NewRegistry(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sender.Close()
	r, err := retrier.New(retrier.Config{PushWorkers: sender.PoolSize(), BackoffBase: time.Second},
		retrier.Deps{Store: stores.Postgres, Attempts: stores.ClickHouse, Push: sender.Notifications(), StandalonePush: sender},
		prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	const pushToken = "bench-push-token"
	reg := prometheus.NewRegistry()
	api, err := webapi.New(webapi.Config{AdminToken: "bench-admin-token", PushToken: pushToken}, stores.Registry, nil,
		reg, reg, slog.New(slog.DiscardHandler), webapi.WithPushes(stores.Postgres, stores.Postgres))
	if err != nil {
		b.Fatal(err)
	}
	apiServer := httptest.NewServer(api.Handler())
	defer apiServer.Close()
	client := apiServer.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = callers

	b.ResetTimer()
	start := time.Now()
	stop := runRetrier(b, r)
	defer stop()
	var next atomic.Int64
	var posters sync.WaitGroup
	for range callers {
		posters.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				body := fmt.Sprintf(`{"platform":"IOS","messagePrototypeKey":"Hello","pushKey":"device-%d","message":"push %d"}`, i, i)
				req, err := http.NewRequest(http.MethodPost, apiServer.URL+"/push", strings.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				req.Header.Set("Authorization", "Bearer "+pushToken)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("POST /push = %d", resp.StatusCode)
					return
				}
			}
		})
	}
	posters.Wait()
	posted := time.Since(start)
	// Stalled, not slow: at 250 a second plus the slowest answer, all are in.
	waitCount(b, stores.Postgres, "pushes answered 200 by the fake Swrve", answered.count, int64(b.N),
		time.Duration(b.N/250+30)*time.Second)
	elapsed := time.Since(start)
	b.StopTimer()

	b.ReportMetric(float64(b.N)/posted.Seconds(), "posts/s")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "overall_sends/s")
	reportSwrveRun(b, fake.Stats(), arrivals.sorted(), answered.sorted())
}
