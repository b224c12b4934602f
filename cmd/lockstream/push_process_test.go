package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/notifier/swrve"
	"github.com/lockstream/lockstream/notifier/swrve/swrvetest"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
)

// The push process tests run `lockstream api` and `lockstream retrier` as
// processes (see startDeliveryNode) against a fake Swrve served by the test
// process, so the test sees every request Swrve got and how it was answered,
// and the retrier's own /metrics. They show the two claims for
// standalone pushes: many concurrent callers are all served within Swrve's
// limit by a bounded process, and a retrier killed with SIGKILL loses none.

const pushToken = "push-process-token"

// The push keys file of the tests: prototype "Hello", a campaign per platform.
const (
	pushPrototype   = "Hello"
	iosCampaign     = "campaign-ios"
	androidCampaign = "campaign-android"
)

// pushSettings writes the push keys file and returns the settings that point
// the node's processes at the fake Swrve, with the retrier's /metrics on
// metricsAddr.
func pushSettings(t *testing.T, swrveURL, metricsAddr string, more ...string) []string {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "pushkeys.yaml")
	yaml := fmt.Sprintf("swrve:\n  messagePrototypePushKeys:\n    %q:\n      IOS: %s\n      ANDROID: %s\n",
		pushPrototype, iosCampaign, androidCampaign)
	if err := os.WriteFile(keys, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return append([]string{
		"LOCKSTREAM_PUSH_TOKEN=" + pushToken,
		"LOCKSTREAM_SWRVE_URL=" + swrveURL + "/push",
		"LOCKSTREAM_SWRVE_PUSH_KEYS=" + keys,
		"LOCKSTREAM_METRICS_ADDR=" + metricsAddr, // only the retrier reads it; the API serves /metrics itself
		"LOCKSTREAM_RETRY_BACKOFF_BASE=50ms",
	}, more...)
}

// testPush is one push a test sends: its device and message are unique, so the
// fake's record of a message is the record of that push.
type testPush struct {
	platform string
	device   string
	message  string
}

func newTestPush(prefix string, sender, i int) testPush {
	p := testPush{platform: "IOS", device: fmt.Sprintf("%s-device-%02d-%04d", prefix, sender, i),
		message: fmt.Sprintf("%s push %02d-%04d", prefix, sender, i)}
	if i%2 == 1 {
		p.platform = "ANDROID"
	}
	return p
}

func (p testPush) body() map[string]any {
	return map[string]any{"platform": p.platform, "messagePrototypeKey": pushPrototype, "pushKey": p.device, "message": p.message}
}

// campaign is the Swrve push key the push must be sent with.
func (p testPush) campaign() string {
	if p.platform == "IOS" {
		return iosCampaign
	}
	return androidCampaign
}

// postPush posts p to path (/push or /v1/pushes) with client, from any
// goroutine, and returns the answer's id (empty for /push, which answers
// nothing) or an error unless the status is want.
func postPush(client *http.Client, api, path string, p testPush, want int) (string, error) {
	b, err := json.Marshal(p.body())
	if err != nil {
		return "", err
	}
	req, err := http.NewRequest(http.MethodPost, api+path, bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+pushToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("POST %s: reading the answer: %w", path, err)
	}
	if resp.StatusCode != want {
		return "", fmt.Errorf("POST %s: status %d, want %d: %s", path, resp.StatusCode, want, raw)
	}
	if len(raw) == 0 {
		return "", nil
	}
	var created struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &created); err != nil || created.ID == "" {
		return "", fmt.Errorf("POST %s: answer without an id (%v): %s", path, err, raw)
	}
	return created.ID, nil
}

// swrveRecord is what the fake Swrve received and answered, by message; its
// methods are the fake's Observe and Answered hooks. Safe for concurrent use.
type swrveRecord struct {
	mu       sync.Mutex
	received map[string]int
	ok       map[string]int
	refused  map[int]int                  // answers other than 200, by status
	requests map[string]swrvetest.Request // the last request of each message
}

func newSwrveRecord() *swrveRecord {
	return &swrveRecord{received: map[string]int{}, ok: map[string]int{}, refused: map[int]int{},
		requests: map[string]swrvetest.Request{}}
}

func (r *swrveRecord) observe(req swrvetest.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.received[req.Message]++
	r.requests[req.Message] = req
}

func (r *swrveRecord) answered(req swrvetest.Request, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if status == http.StatusOK {
		r.ok[req.Message]++
	} else {
		r.refused[status]++
	}
}

// swrveSnapshot is a copy of a swrveRecord.
type swrveSnapshot struct {
	received, ok map[string]int
	refused      map[int]int
	requests     map[string]swrvetest.Request
}

func (r *swrveRecord) snapshot() swrveSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return swrveSnapshot{received: maps.Clone(r.received), ok: maps.Clone(r.ok), refused: maps.Clone(r.refused),
		requests: maps.Clone(r.requests)}
}

// checkSwrveSaw fails t unless the fake received exactly the pushes given, each
// with its campaign and device, and answered each OK between 1 and maxOK times
// and nothing but OK when onlyOK.
func checkSwrveSaw(t *testing.T, got swrveSnapshot, pushes []testPush, maxOK int, onlyOK bool) {
	t.Helper()
	problems := 0
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		if problems++; problems >= 10 {
			t.FailNow()
		}
	}
	for _, p := range pushes {
		req, seen := got.requests[p.message]
		switch {
		case !seen:
			fail("Swrve never received push %q", p.message)
		case req.PushKey != p.campaign() || req.User != p.device:
			fail("push %q reached Swrve as campaign %q for device %q, want %q for %q",
				p.message, req.PushKey, req.User, p.campaign(), p.device)
		case got.ok[p.message] < 1 || got.ok[p.message] > maxOK:
			fail("Swrve answered push %q OK %d times (received it %d times), want 1 to %d",
				p.message, got.ok[p.message], got.received[p.message], maxOK)
		}
	}
	if len(got.received) != len(pushes) {
		t.Fatalf("Swrve received %d distinct messages, want the %d pushes", len(got.received), len(pushes))
	}
	if onlyOK && len(got.refused) > 0 {
		t.Errorf("Swrve answered other than OK: %v (by status)", got.refused)
	}
}

// scrapeMetrics reads a Prometheus text exposition into series → value, each
// series named as exposed (name{label="value",...}).
func scrapeMetrics(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("GET %s: unreadable line %q", url, line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("GET %s: unreadable line %q: %w", url, line, err)
		}
		out[line[:i]] = v
	}
	if err := lines.Err(); err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return out, nil
}

// metric returns one series of a scrape, failing t when it is missing.
func metric(t *testing.T, m map[string]float64, series string) float64 {
	t.Helper()
	v, ok := m[series]
	if !ok {
		t.Fatalf("/metrics has no %s", series)
	}
	return v
}

// Series the tests read from the processes' /metrics.
const (
	seriesSwrveSent     = `lockstream_deliveries_total{channel="swrve",outcome="sent"}`
	seriesInFlightSends = `lockstream_swrve_in_flight_sends`
	seriesPoolSize      = `lockstream_swrve_pool_size`
	seriesGoroutines    = `go_goroutines`
	seriesRequeued      = `lockstream_deliveries_requeued_total`
	seriesFenced        = `lockstream_delivery_outcomes_fenced_total`
	seriesReceived      = `lockstream_pushes_received_total{kind="immediate"}`
)

// sampler scrapes a process's /metrics every 100 ms in the background and
// keeps the highest in-flight sends and goroutines seen.
type sampler struct {
	stopc chan struct{}
	done  chan struct{}
	// Written by the sampling goroutine; read them after stop.
	samples, failures          int
	lastErr                    error
	maxInFlight, maxGoroutines float64
}

func startSampler(url string) *sampler {
	s := &sampler{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			m, err := scrapeMetrics(url)
			if err != nil {
				s.failures++
				s.lastErr = err
			} else {
				s.samples++
				s.maxInFlight = max(s.maxInFlight, m[seriesInFlightSends])
				s.maxGoroutines = max(s.maxGoroutines, m[seriesGoroutines])
			}
			select {
			case <-s.stopc:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// stop ends the sampling; the sampler's fields are final once it returns.
func (s *sampler) stop() {
	close(s.stopc)
	<-s.done
}

// waitMetrics waits until the process serves /metrics at url.
func waitMetrics(n *deliveryNode, url string) {
	n.t.Helper()
	n.h.waitFor("the retrier to serve "+url, func() (bool, string) {
		_, err := scrapeMetrics(url)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// TestPushLoadThroughProcesses: 20 callers post 1,000 pushes each, one after
// another, to `lockstream api`, and one `lockstream retrier` sends them to a
// fake Swrve that allows Swrve's 300 starts a second and answers in 1/100 of
// Swrve's measured time (so the rate, not the pool, holds sends back). Every
// push must be SENT, each accepted by Swrve exactly once, with no 429; neither
// Swrve nor the retrier's in-flight gauge may see more requests at once than
// the pool; the retrier's goroutines stay under a bound that does not grow
// with the number of pushes. Every 100th push goes through POST /v1/pushes
// instead of the legacy POST /push (which answers no id), so that a sample can
// be checked through GET /v1/pushes/{id}. It takes about 80 s: 20,000 pushes
// at about 264 a second.
//
// Not parallel, and `make test` runs it alone after every other test: what
// Swrve sees depends on how late the processes' goroutines run, and other
// tests (one keeps hundreds of requests open at Swrve's real latency) would
// add their load to the delays.
func TestPushLoadThroughProcesses(t *testing.T) {
	const (
		senders     = 20
		perSender   = 1000
		total       = senders * perSender
		sampleEvery = 100
		// Below Swrve's 300 for the reason TestLoadSwrveLimit (notifier/swrve)
		// gives: the sender keeps its own starts within its rate, but the fake
		// counts a request when its handler runs, which on a loaded 2-core
		// machine (and this test process runs under -race) lags the start by
		// tens of milliseconds now and then, more than the sender's 20 ms
		// margin at 300. At 290 a run beside the SIGKILL test saw 301 in a
		// second, and at 270 one of three runs of `go test -count=3 ./...`
		// (load 6–7); hence 270, run alone.
		swrveRate = 270
	)
	record := newSwrveRecord()
	fake := swrvetest.NewServer(swrvetest.Config{Scale: 0.01, MaxPerSecond: swrvetest.DefaultMaxPerSecond, Seed: 3,
		Observe: record.observe, Answered: record.answered})
	fakeServer := httptest.NewServer(fake)
	t.Cleanup(fakeServer.Close)

	metricsAddr := freeAddr(t)
	n := startDeliveryNode(t, []string{"api", "retrier"},
		pushSettings(t, fakeServer.URL, metricsAddr, "LOCKSTREAM_SWRVE_RATE="+strconv.Itoa(swrveRate))...)
	retrierMetrics := "http://" + metricsAddr + "/metrics"
	waitMetrics(n, retrierMetrics)
	m, err := scrapeMetrics(retrierMetrics)
	if err != nil {
		t.Fatal(err)
	}
	pool := swrve.Config{Rate: swrveRate}.WithDefaults().PoolSize() // 270/s × 2 s = 540
	if got := metric(t, m, seriesPoolSize); got != float64(pool) {
		t.Fatalf("the retrier's Swrve pool is %v, want %d (rate %d × the default expected latency)", got, pool, swrveRate)
	}

	samples := startSampler(retrierMetrics)
	stopped := false
	defer func() {
		if !stopped {
			samples.stop()
		}
	}()
	// Keep a connection per caller: the default two idle connections per host
	// would make the other 18 callers dial for every one of 20,000 requests.
	client := &http.Client{Timeout: processWait, Transport: &http.Transport{MaxIdleConnsPerHost: senders}}
	t.Cleanup(client.CloseIdleConnections)
	pushes := make([]testPush, 0, total)
	for s := range senders {
		for i := range perSender {
			pushes = append(pushes, newTestPush("load", s, i))
		}
	}
	sampled := make([][]string, senders) // ids of the pushes posted to /v1/pushes, by caller
	errs := make([]error, senders)
	start := time.Now()
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i, p := range pushes[s*perSender : (s+1)*perSender] {
				if i%sampleEvery == sampleEvery-1 {
					id, err := postPush(client, n.api, "/v1/pushes", p, http.StatusCreated)
					if err != nil {
						errs[s] = err
						return
					}
					sampled[s] = append(sampled[s], id)
					continue
				}
				if _, err := postPush(client, n.api, "/push", p, http.StatusOK); err != nil {
					errs[s] = err
					return
				}
			}
		})
	}
	wg.Wait()
	posted := time.Since(start)
	for s, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", s, err)
		}
	}

	n.h.waitFor(fmt.Sprintf("all %d pushes to be SENT", total), func() (bool, string) {
		m, err := scrapeMetrics(retrierMetrics)
		if err != nil {
			return false, err.Error()
		}
		sent := m[seriesSwrveSent]
		return sent >= total, fmt.Sprintf("%v SENT; the fake Swrve saw %+v", sent, fake.Stats())
	})
	elapsed := time.Since(start)
	samples.stop()
	stopped = true

	st := fake.Stats()
	t.Logf("%d pushes posted by %d callers in %s (%.0f/s); all SENT after %s: %.1f pushes/s (the sender paces at %.1f/s)",
		total, senders, posted.Round(time.Millisecond), total/posted.Seconds(), elapsed.Round(time.Millisecond),
		total/elapsed.Seconds(), swrve.PacedRate(swrveRate))
	t.Logf("fake Swrve: %+v; retrier (%d samples, %d failed): in-flight sends at most %v of a pool of %d, goroutines at most %v",
		st, samples.samples, samples.failures, samples.maxInFlight, pool, samples.maxGoroutines)

	// Swrve: every push accepted exactly once. How many starts fell in one
	// second depends on how late a loaded machine runs the processes'
	// goroutines, so a 429 is not a failure here (it is logged, and the push
	// must have been retried to SENT); the pacing itself is measured by the
	// Swrve benchmarks, not asserted.
	checkSwrveSaw(t, record.snapshot(), pushes, 1, false)
	if st.OK != total || st.Total != total+st.TooMany {
		t.Errorf("Swrve saw %d requests, %d OK, %d answered 429; want %d OK and every other one a 429", st.Total, st.OK, st.TooMany, total)
	}
	if st.TooMany > 0 || st.MaxPerSecond > swrvetest.DefaultMaxPerSecond {
		t.Logf("timing, not asserted: Swrve answered %d requests 429 and saw at most %d starts in one second (its limit %d)",
			st.TooMany, st.MaxPerSecond, swrvetest.DefaultMaxPerSecond)
	}
	if st.MaxConcurrent > int64(pool) {
		t.Errorf("Swrve saw %d requests at once, above the pool of %d", st.MaxConcurrent, pool)
	}

	// The retrier: in flight within the pool, goroutines bounded.
	if samples.samples == 0 {
		t.Fatalf("no sample of the retrier's /metrics: %v", samples.lastErr)
	}
	if samples.maxInFlight > float64(pool) {
		t.Errorf("lockstream_swrve_in_flight_sends reached %v, above the pool of %d", samples.maxInFlight, pool)
	}
	// A claimed push is one retrier worker goroutine (the push workers are as
	// many as the pool; the webhook and email workers add
	// retrier.DefaultWorkers), waiting for its turn or on one connection to
	// Swrve, which has a read and a write goroutine; the transport keeps at
	// most pool connections, busy or idle. The 100 over that are the process's
	// own: the runtime, the pgx and ClickHouse pools, the metrics server and
	// its scrapes, the retrier's loops. None of it grows with the number of
	// pushes.
	if bound := float64(retrier.DefaultWorkers + 3*pool + 100); samples.maxGoroutines > bound {
		t.Errorf("the retrier ran %v goroutines, above the bound of %v", samples.maxGoroutines, bound)
	}

	// The outbox: as many pushes received as sent, none failed or retried.
	m, err = scrapeMetrics(retrierMetrics)
	if err != nil {
		t.Fatal(err)
	}
	for series, want := range map[string]float64{
		seriesSwrveSent: total,
		`lockstream_deliveries_total{channel="swrve",outcome="retry"}`:  float64(st.TooMany),
		`lockstream_deliveries_total{channel="swrve",outcome="failed"}`: 0,
		seriesInFlightSends: 0,
	} {
		if got := m[series]; got != want {
			t.Errorf("retrier: %s = %v, want %v", series, got, want)
		}
	}
	api, err := scrapeMetrics(n.api + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if got := metric(t, api, seriesReceived); got != total {
		t.Errorf("api: %s = %v, want %d", seriesReceived, got, total)
	}

	// The sample: SENT, on the first attempt unless Swrve answered 429 (see
	// above), which the attempt log shows.
	for _, ids := range sampled {
		if len(ids) != perSender/sampleEvery {
			t.Fatalf("a caller posted %d pushes to /v1/pushes, want %d", len(ids), perSender/sampleEvery)
		}
		for _, id := range ids {
			detail := waitPushLogComplete(n, id)
			log := attemptLog(t, detail)
			last := len(log) - 1
			if detail["state"] != "SENT" || last < 0 || detail["attempts"] != float64(len(log)) ||
				log[last]["status"] != "SENT" || log[last]["swrve_code"] != float64(http.StatusOK) ||
				(st.TooMany == 0 && len(log) != 1) {
				t.Fatalf("push %s is %v after %v attempts, attempt_log %v; want SENT, its last attempt answered 200",
					id, detail["state"], detail["attempts"], log)
			}
		}
	}
}

// getPush returns GET /v1/pushes/{id}.
func (n *deliveryNode) getPush(id string) map[string]any {
	n.t.Helper()
	return n.call("GET", "/v1/pushes/"+id, pushToken, nil, http.StatusOK)
}

// waitPushLog waits until the push's attempt_log holds at least entries
// attempts (they reach ClickHouse through a writer that flushes each second)
// and returns its detail.
func waitPushLog(n *deliveryNode, id string, entries int) map[string]any {
	n.t.Helper()
	var detail map[string]any
	n.h.waitFor(fmt.Sprintf("%d attempts in push %s's attempt_log", entries, id), func() (bool, string) {
		detail = n.getPush(id)
		log, _ := detail["attempt_log"].([]any)
		return len(log) >= entries, fmt.Sprintf("%d attempts logged, state %v", len(log), detail["state"])
	})
	return detail
}

// waitPushLogComplete waits until push id is SENT and its attempt_log holds as
// many attempts as the push counts, and returns its detail.
func waitPushLogComplete(n *deliveryNode, id string) map[string]any {
	n.t.Helper()
	var detail map[string]any
	n.h.waitFor(fmt.Sprintf("push %s SENT with every attempt in its attempt_log", id), func() (bool, string) {
		detail = n.getPush(id)
		log, _ := detail["attempt_log"].([]any)
		attempts, _ := detail["attempts"].(float64)
		return detail["state"] == "SENT" && float64(len(log)) >= attempts,
			fmt.Sprintf("%d attempts logged of %v, state %v", len(log), attempts, detail["state"])
	})
	return detail
}

// TestPushesSurviveSIGKILL posts 300 pushes, starts a retrier against a fake
// Swrve with Swrve's real latencies (about 1 s, up to 7.7 s), kills the
// retrier with SIGKILL while Swrve holds many of its requests open, and starts
// a new one: every push must end SENT and be accepted by Swrve at least once
// and at most twice; the pushes whose request the crash cut short must be sent
// again once their lease ran out, and their attempt log must show only the new
// retrier's attempt (the requeue of an expired lease records no attempt); the
// new retrier must requeue exactly the pushes the dead one held IN_FLIGHT.
func TestPushesSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	const pushes = 300
	record := newSwrveRecord()
	fake := swrvetest.NewServer(swrvetest.Config{Scale: 1, Seed: 4, Observe: record.observe, Answered: record.answered})
	fakeServer := httptest.NewServer(fake)
	t.Cleanup(fakeServer.Close) // after the processes' cleanups: it waits for its handlers

	// The lease makes the attempt timeout half of it (leaseConfig): 10 s, more
	// than Swrve's slowest answer (7.7 s), so a live retrier neither times out
	// nor loses its lease; and it is short enough that the new retrier takes
	// the dead one's pushes over within about half a minute.
	metricsAddr := freeAddr(t)
	n := startDeliveryNode(t, []string{"api"}, pushSettings(t, fakeServer.URL, metricsAddr, "LOCKSTREAM_RETRY_LEASE=20s")...)
	retrierMetrics := "http://" + metricsAddr + "/metrics"

	// Every push is waiting before the retrier starts, so it cannot have sent
	// them all before the test looks.
	all := make([]testPush, pushes)
	ids := make([]string, pushes)
	byMessage := map[string]string{} // message → push id
	for i := range all {
		all[i] = newTestPush("kill", 0, i)
		created := n.call("POST", "/v1/pushes", pushToken, all[i].body(), http.StatusCreated)
		ids[i], _ = created["id"].(string)
		byMessage[all[i].message] = ids[i]
	}
	start := time.Now()
	n.start("retrier")

	// Kill it in mid-run: some pushes SENT, many open at Swrve, the rest waiting.
	n.h.waitFor("pushes accepted and in flight at Swrve, and IN_FLIGHT in the API", func() (bool, string) {
		st := fake.Stats()
		if st.OK < 50 || st.InFlight < 10 {
			return false, fmt.Sprintf("Swrve accepted %d pushes and has %d requests open", st.OK, st.InFlight)
		}
		for _, id := range ids {
			if n.getPush(id)["state"] == "IN_FLIGHT" {
				return true, ""
			}
		}
		return false, "no push IN_FLIGHT"
	})
	openAtKill := fake.Stats().InFlight
	n.procs["retrier"].kill()
	killedAfter := time.Since(start)
	// The dead retrier's connections closed: Swrve's handlers notice and end.
	n.h.waitFor("Swrve to drop the dead retrier's requests", func() (bool, string) {
		open := fake.Stats().InFlight
		return open == 0, fmt.Sprintf("%d requests open", open)
	})
	before := record.snapshot()
	// Cut short: Swrve got the request and never answered it.
	var cut []string
	for msg := range before.received {
		if before.ok[msg] == 0 {
			cut = append(cut, msg)
		}
	}
	slices.Sort(cut)
	held := map[string]bool{} // pushes the dead retrier held: IN_FLIGHT with its lease running
	for _, id := range ids {
		if n.getPush(id)["state"] == "IN_FLIGHT" {
			held[id] = true
		}
	}
	t.Logf("killed the retrier %s after it started: %d requests open at Swrve, %d pushes accepted, %d cut short, %d IN_FLIGHT",
		killedAfter.Round(time.Millisecond), openAtKill, len(before.ok), len(cut), len(held))
	if len(cut) == 0 {
		t.Fatal("no push was in flight at Swrve when the retrier was killed")
	}
	for _, msg := range cut {
		if !held[byMessage[msg]] {
			t.Fatalf("push %s (%q) was cut short by the crash but is not IN_FLIGHT", byMessage[msg], msg)
		}
	}

	restart := time.Now()
	n.start("retrier")
	sent := map[string]bool{}
	n.h.waitFor("every push to be SENT after the restart", func() (bool, string) {
		for _, id := range ids {
			if !sent[id] && n.getPush(id)["state"] == "SENT" {
				sent[id] = true
			}
		}
		return len(sent) == pushes, fmt.Sprintf("%d of %d SENT", len(sent), pushes)
	})
	t.Logf("all %d pushes SENT %s after the restart; fake Swrve: %+v", pushes, time.Since(restart).Round(time.Millisecond), fake.Stats())

	after := record.snapshot()
	checkSwrveSaw(t, after, all, 2, true)
	twice := 0
	for _, p := range all {
		if after.ok[p.message] == 2 {
			twice++
		}
	}
	t.Logf("accepted twice by Swrve (the answer came, the outcome was not recorded before the kill): %d", twice)

	// The pushes cut short: attempt 1 logged by the lease's expiry (its
	// outcome unknown), sent again by the new retrier as attempt 2.
	for _, msg := range cut {
		id := byMessage[msg]
		if after.received[msg] < 2 {
			t.Errorf("push %s (%q) was cut short by the crash but Swrve received it %d times, want it sent again",
				id, msg, after.received[msg])
		}
		detail := waitPushLog(n, id, 2)
		log := attemptLog(t, detail)
		if detail["attempts"] != float64(2) || len(log) != 2 ||
			log[0]["attempt"] != float64(1) || log[0]["error_type"] != storage.ErrorTypeLeaseExpired ||
			log[1]["attempt"] != float64(2) || log[1]["status"] != "SENT" || detail["last_error"] != nil {
			t.Errorf("push %s cut short by the crash: %v attempts, last_error %v, attempt_log %v; want 2 attempts, "+
				"the first logged at its lease's expiry, the second SENT, no error", id, detail["attempts"], detail["last_error"], log)
		}
	}

	// The new retrier requeued exactly the pushes the dead one held, and none
	// of its own outcomes was fenced off.
	m, err := scrapeMetrics(retrierMetrics)
	if err != nil {
		t.Fatal(err)
	}
	if got := metric(t, m, seriesRequeued); got != float64(len(held)) {
		t.Errorf("the new retrier requeued %v pushes, want the %d the dead one held", got, len(held))
	}
	if got := metric(t, m, seriesFenced); got != 0 {
		t.Errorf("%v outcomes of the new retrier were fenced off, want none", got)
	}
}
