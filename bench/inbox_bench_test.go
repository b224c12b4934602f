package bench

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/migrations"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/registry/secretbox"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
	"github.com/lockstream/lockstream/webapi/live"
)

// Inbox sizes of BenchmarkInboxList: 10 million messages over 100,000 members.
const (
	inboxMembers  = 100_000
	inboxMessages = 10_000_000
	// inboxRequests is how many requests of each kind are timed.
	inboxRequests = 2000
)

// seedMembers creates n members of one client in one statement, member i with
// the token "lsm_bench<i>" and id md5(i), and their inbox counters at perMember.
func seedMembers(ctx context.Context, b *testing.B, conn *pgx.Conn, clientID string, n, perMember int) {
	b.Helper()
	if _, err := conn.Exec(ctx, `
		INSERT INTO members (id, client_id, name, timezone, preferences, token_hash)
		SELECT md5(i::text)::uuid, $1, 'member ' || i, 'UTC', '{"email":"off","push":false,"digest_times":[]}',
		       sha256(convert_to('lsm_bench' || i, 'UTF8'))
		FROM generate_series(0, $2 - 1) AS i`, clientID, n); err != nil {
		b.Fatalf("seeding members: %v", err)
	}
	if _, err := conn.Exec(ctx, `
		INSERT INTO member_inbox (member_id, last_seq, epoch)
		SELECT md5(i::text)::uuid, $2, 'bench' FROM generate_series(0, $1 - 1) AS i`, n, perMember); err != nil {
		b.Fatalf("seeding inbox counters: %v", err)
	}
	// What autovacuum does to tables that grew this much, within its naptime.
	if _, err := conn.Exec(ctx, `ANALYZE members, member_inbox`); err != nil {
		b.Fatalf("analyzing the members: %v", err)
	}
}

// BenchmarkInboxList times GET /v1/messages?count-only=true and a 50-message page
// (unseen, newest first, and all messages) for random members of an inbox of 10
// million messages over 100,000 members (100 each, half of them seen, over the
// last three month partitions), one request at a time through the real HTTP
// stack, member token authentication included, and reports p50 and p99 of each.
// The messages are made by one INSERT … SELECT generate_series, then VACUUM
// ANALYZE (what autovacuum does to a table that size), untimed.
//
// The seeding takes 20 minutes or more on a shared 2-core machine: with
// LOCKSTREAM_BENCH_INBOX_PG_URL set to an empty database, the benchmark migrates
// and seeds it once and keeps it, and later runs only measure.
//
//	go test -run '^$' -bench InboxList -benchtime 1x -timeout 60m ./bench/
func BenchmarkInboxList(b *testing.B) {
	ctx := context.Background()
	pgURL := os.Getenv("LOCKSTREAM_BENCH_INBOX_PG_URL")
	if pgURL == "" {
		pgURL = storagetest.New(b).PostgresURL
	} else if err := migrations.Migrate(ctx, pgURL, storagetest.NewClickHouseDatabase(b), slog.New(slog.DiscardHandler)); err != nil {
		b.Fatal(err)
	}
	key, err := secretbox.ParseKey(secretbox.NewKey())
	if err != nil {
		b.Fatal(err)
	}
	box, err := secretbox.New(key)
	if err != nil {
		b.Fatal(err)
	}
	pg, err := storage.OpenPostgres(ctx, pgURL, storage.WithSecretBox(box))
	if err != nil {
		b.Fatal(err)
	}
	defer pg.Close()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	perMember := inboxMessages / inboxMembers
	var seeded int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM member_inbox WHERE last_seq = $1`, perMember).Scan(&seeded); err != nil {
		b.Fatal(err)
	}
	if seeded != inboxMembers {
		seedInbox(ctx, b, conn, pg, perMember)
	}
	measureInbox(ctx, b, pg, perMember)
}

// seedInbox fills an empty database with the inbox of BenchmarkInboxList.
func seedInbox(ctx context.Context, b *testing.B, conn *pgx.Conn, pg *storage.Postgres, perMember int) {
	b.Helper()
	client, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "bench", WebhookURL: "https://example.com/h", Secret: "whsec_x"})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	seedMembers(ctx, b, conn, client.ID, inboxMembers, perMember)
	if _, err := conn.Exec(ctx, `SELECT lockstream_inbox_partition(now() - make_interval(months => m)) FROM generate_series(1, 2) AS m`); err != nil {
		b.Fatal(err)
	}
	// Message i goes to member i % members with seq i / members + 1; a third of
	// them in each of the last three months, in seq order; the even seqs seen.
	if _, err := conn.Exec(ctx, `
		INSERT INTO inbox_messages (member_id, seq, id, created_at, client_id, type, sensor_id, data, previous,
		                            event_at, severity, cause, seen_at)
		SELECT md5((i % $2)::text)::uuid, i / $2 + 1, gen_random_uuid(), t, $1,
		       (ARRAY['state_changed', 'connection_lost', 'connection_restored'])[i % 3 + 1],
		       'bench' || (i % 1000), (i / $2) % 2, 1 - (i / $2) % 2, t, 'info', 'event',
		       CASE WHEN (i / $2) % 2 = 0 THEN t END
		FROM generate_series(0, $3 - 1) AS i,
		     LATERAL (SELECT now() - interval '55 days' + (i / $2) * interval '13 hours') AS x (t)`,
		client.ID, inboxMembers, inboxMessages); err != nil {
		b.Fatalf("seeding messages: %v", err)
	}
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE inbox_messages`); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE members`); err != nil {
		b.Fatal(err)
	}
	var size string
	if err := conn.QueryRow(ctx, `SELECT pg_size_pretty(sum(pg_total_relation_size(inhrelid))) FROM pg_inherits
		WHERE inhparent = 'inbox_messages'::regclass`).Scan(&size); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d messages over %d members in %v; inbox_messages with its indexes: %s",
		inboxMessages, inboxMembers, time.Since(start).Round(time.Second), size)
}

// measureInbox times the requests of BenchmarkInboxList.
func measureInbox(ctx context.Context, b *testing.B, pg *storage.Postgres, perMember int) {
	b.Helper()
	reg := prometheus.NewRegistry()
	server, err := webapi.New(webapi.Config{AdminToken: "bench-admin-token"}, registry.New(pg), nil, reg, reg,
		slog.New(slog.DiscardHandler), webapi.WithInbox(registry.New(pg), live.NewPostgresStore(pg), nil, webapi.InboxConfig{}))
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(server.Handler())
	defer ts.Close()
	httpClient := ts.Client()
	rng := rand.New(rand.NewPCG(1, 2))

	for _, q := range []struct{ name, query string }{
		{"count-only", "?count-only=true"},
		{"page-50-unseen", "?limit=50"},
		{"page-50-all", "?limit=50&seen=true"},
	} {
		latencies := make([]time.Duration, 0, inboxRequests)
		for range inboxRequests {
			token := "lsm_bench" + strconv.Itoa(rng.IntN(inboxMembers))
			req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/messages"+q.query, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			t0 := time.Now()
			resp, err := httpClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			var body struct {
				Total    int               `json:"total"`
				Messages []json.RawMessage `json:"messages"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			latencies = append(latencies, time.Since(t0))
			if err != nil || resp.StatusCode != http.StatusOK || body.Total < perMember/2 {
				b.Fatalf("GET /v1/messages%s: %d %v total %d", q.query, resp.StatusCode, err, body.Total)
			}
		}
		at := percentiles(latencies)
		b.ReportMetric(at(0.5), q.name+"-p50-ms")
		b.ReportMetric(at(0.99), q.name+"-p99-ms")
		b.Logf("%s: p50 %.2f ms, p99 %.2f ms, max %.2f ms over %d requests", q.name, at(0.5), at(0.99), at(1), len(latencies))
	}
}

// defaultStreamCount is how many streams BenchmarkStreamFanout connects to one
// api process; LOCKSTREAM_BENCH_STREAMS overrides it (a smaller smoke run).
const defaultStreamCount = 10_000

// BenchmarkStreamFanout connects 10,000 members' live streams to one `lockstream
// api` process, fans one sensor event out to all of them (one fan-out write:
// one shared inbox message announced with each member's seq, then the
// members' 10,000 copies), and reports the time from the start of that write
// until the first and the last stream received its message, and the api
// process's memory per connected stream (resident set and Go heap+stacks, read
// from its /metrics, before and after connecting). It logs when its own LISTEN
// heard the event's NOTIFY, the spread of the streams' arrivals, and the CPU
// time the api process, this process (the streams' client) and the database's
// Postgres backends used until the last stream had its message.
//
//	go test -run '^$' -bench StreamFanout -benchtime 1x -timeout 30m ./bench/
//
// LOCKSTREAM_BENCH_PERF_DIR=<folder> records the event's window with `perf
// record -a -g` (perf must be installed) in <folder>/perf.data.
func BenchmarkStreamFanout(b *testing.B) {
	streamCount := defaultStreamCount
	if n, err := strconv.Atoi(os.Getenv("LOCKSTREAM_BENCH_STREAMS")); err == nil && n > 0 {
		streamCount = n
	}
	stores := storagetest.New(b)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, stores.PostgresURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	pg := stores.Postgres
	if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: "benchdoor", Address: "1 Bench Street"}); err != nil {
		b.Fatal(err)
	}
	client, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "bench", WebhookURL: "https://example.com/h", Secret: "whsec_x"})
	if err != nil {
		b.Fatal(err)
	}
	if err := registry.New(pg).LinkSensor(ctx, client.ID, "benchdoor"); err != nil {
		b.Fatal(err)
	}
	seedMembers(ctx, b, conn, client.ID, streamCount, 0)
	warmFanout(ctx, b, pg)

	api, apiPID := startAPIProcess(b, stores)
	before := apiMemory(b, api)

	// Connect every stream; each records when its first message arrives.
	var (
		wg        sync.WaitGroup
		hellos    sync.WaitGroup
		received  atomic.Int64
		lastNano  atomic.Int64
		firstNano atomic.Int64
		failures  atomic.Int64
		arrivals  = make([]atomic.Int64, streamCount) // unix nanos, by stream
	)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streamClient := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	// Tickets live 60 s: each stream takes its own right before connecting, 16 at
	// a time, on a few kept-alive connections.
	ticketClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	ticketSlots := make(chan struct{}, 16)
	hellos.Add(streamCount)
	for i := range streamCount {
		wg.Go(func() {
			ticketSlots <- struct{}{}
			ticket, err := takeTicket(ticketClient, api, i)
			<-ticketSlots
			if err != nil {
				failures.Add(1)
				hellos.Done()
				b.Logf("stream %d: %v", i, err)
				return
			}
			if err := readOneMessage(sctx, streamClient, api, ticket, hellos.Done, func(at time.Time) {
				received.Add(1)
				arrivals[i].Store(at.UnixNano())
				firstNano.CompareAndSwap(0, at.UnixNano())
				for {
					last := lastNano.Load()
					if at.UnixNano() <= last || lastNano.CompareAndSwap(last, at.UnixNano()) {
						break
					}
				}
			}); err != nil && sctx.Err() == nil {
				failures.Add(1)
				b.Logf("stream %d: %v", i, err)
			}
		})
	}
	hellos.Wait()
	if n := failures.Load(); n > 0 {
		b.Fatalf("%d streams failed", n)
	}
	waitMetric(b, api, "lockstream_stream_connections", float64(streamCount))
	// Live memory is what is left after garbage collection (which also shrinks
	// the stacks that grew while the streams were opened): wait for two cycles,
	// which the runtime runs within two minutes even when idle.
	gcs := scrape(b, api)["go_gc_duration_seconds_count"]
	waitFor(b, "two garbage collections in the api process", 5*time.Minute, func() bool {
		return scrape(b, api)["go_gc_duration_seconds_count"] >= gcs+2
	})
	after := apiMemory(b, api)

	readsBefore := scrape(b, api)["lockstream_stream_fetch_duration_seconds_count"]
	heard := listenInbox(ctx, b, stores.PostgresURL)
	stopWindow := recordWindow(b)
	apiCPU, benchCPU, pgCPU := cpuOf(apiPID), cpuOf(os.Getpid()), backendsCPU(ctx, b, conn)
	start := time.Now()
	data := 1
	// The write runs beside the wait: the CPU times are read when the last
	// stream has its message, which may come before the call returns.
	var (
		created   fanout.NotificationsCreated
		committed time.Time
		writeErr  error
		writing   sync.WaitGroup
	)
	// As the fan-out writes it: the event's transaction, then the members'
	// copies InboxCopyDelay (its default) after the commit.
	store := fanout.NewPostgresStore(pg)
	var copied time.Time
	writing.Go(func() {
		created, writeErr = store.CreateNotificationsClaiming(ctx, []storage.NotificationInput{{EventID: "bench-event",
			Type: "state_changed", SensorID: "benchdoor", Data: &data, At: start}}, fanout.Claim{})
		committed = time.Now()
		if writeErr != nil || !created.SharedPending {
			return
		}
		time.Sleep(fanout.DefaultInboxCopyDelay)
		_, writeErr = store.CopySharedInboxMessages(ctx)
		copied = time.Now()
	})
	deadline := time.Now().Add(2 * time.Minute)
	for received.Load() < int64(streamCount) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d streams got the message within 2 minutes", received.Load(), streamCount)
		}
		time.Sleep(time.Millisecond)
	}
	apiCPU, benchCPU = cpuOf(apiPID)-apiCPU, cpuOf(os.Getpid())-benchCPU
	pgUsed := cpuSince(pgCPU, backendsCPU(ctx, b, conn))
	writing.Wait()
	if writeErr != nil {
		b.Fatal(writeErr)
	}
	written := committed.Sub(start)
	stopWindow()
	lastAt := time.Unix(0, lastNano.Load())
	last := lastAt.Sub(start)
	first := time.Unix(0, firstNano.Load()).Sub(start)
	b.ReportMetric(float64(first)/float64(time.Millisecond), "first-stream-ms")
	m := scrape(b, api)
	b.Logf("api hub: %v reads of the inbox for streams before the event (their replays on connecting), %v after it",
		readsBefore, m["lockstream_stream_fetch_duration_seconds_count"]-readsBefore)
	cancel()
	wg.Wait()
	spread := make([]time.Duration, streamCount)
	for i := range arrivals {
		spread[i] = time.Unix(0, arrivals[i].Load()).Sub(start)
	}
	at := percentiles(spread)
	firstHeard, lastHeard := heard()
	b.Logf("the benchmark's own LISTEN heard the first of the event's NOTIFY payloads %v after the write began, the last %v; "+
		"streams had the message: p10 %.0f ms, p50 %.0f ms, p90 %.0f ms, max %.0f ms",
		firstHeard.Sub(start).Round(time.Millisecond), lastHeard.Sub(start).Round(time.Millisecond), at(0.1), at(0.5), at(0.9), at(1))
	b.ReportMetric(float64(apiCPU)/float64(time.Microsecond)/float64(streamCount), "api-cpu-µs/stream")
	b.Logf("CPU time from the write's start until the last stream had its message (in 10 ms ticks): the api process %v "+
		"(%.1f µs per stream), the benchmark process %v (its streams' reads, the fan-out's write as a client of Postgres, "+
		"a LISTEN), this database's Postgres backends %v (the write, and the members' copies when they began before)",
		apiCPU.Round(time.Millisecond), float64(apiCPU)/float64(time.Microsecond)/float64(streamCount),
		benchCPU.Round(time.Millisecond), pgUsed.Round(time.Millisecond))

	perStreamRSS := float64(after.rss-before.rss) / float64(streamCount) / 1024
	perStreamGo := float64(after.goBytes-before.goBytes) / float64(streamCount) / 1024
	b.ReportMetric(float64(last)/float64(time.Millisecond), "last-stream-ms")
	b.ReportMetric(perStreamRSS, "rss-KiB/stream")
	b.ReportMetric(perStreamGo, "go-KiB/stream")
	b.Logf("%d inbox messages announced in %v (the shared message's commit), their copies written %v after the write began; "+
		"the first of %d streams had its message %v after the write began, the last %v (%v after the commit); "+
		"api memory per stream: %.1f KiB resident, %.1f KiB Go heap+stacks, of which %.1f KiB stacks (goroutines %d → %d)",
		created.InboxMessages, written.Round(time.Millisecond), copied.Sub(start).Round(time.Millisecond), streamCount, first.Round(time.Millisecond), last.Round(time.Millisecond),
		lastAt.Sub(committed).Round(time.Millisecond),
		perStreamRSS, perStreamGo, float64(after.stack-before.stack)/float64(streamCount)/1024, before.goroutines, after.goroutines)
}

// warmFanout has the pool's connections plan the fan-out's statements, as a
// running fan-out's have from its earlier batches (a cold connection spends
// about 10 ms planning them): it fans events out to a client of its own,
// with one member, a few at once so that several connections take part.
func warmFanout(ctx context.Context, b *testing.B, pg *storage.Postgres) {
	b.Helper()
	reg := registry.New(pg)
	if _, err := reg.CreateSensor(ctx, registry.Sensor{ID: "warmdoor", Address: "2 Bench Street"}); err != nil {
		b.Fatal(err)
	}
	client, err := reg.CreateClient(ctx, registry.Client{Name: "warm", WebhookURL: "https://example.com/w", Secret: "whsec_x"})
	if err != nil {
		b.Fatal(err)
	}
	if err := reg.LinkSensor(ctx, client.ID, "warmdoor"); err != nil {
		b.Fatal(err)
	}
	hash := sha256.Sum256([]byte("lsm_warm"))
	if _, _, err := reg.CreateMember(ctx, registry.Member{ClientID: client.ID, Name: "warm", Timezone: "UTC",
		Preferences: registry.DefaultMemberPreferences()}, hash[:], registry.Backfill{}); err != nil {
		b.Fatal(err)
	}
	store := fanout.NewPostgresStore(pg)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Go(func() {
			data := i % 2
			_, err := store.CreateNotifications(ctx, []storage.NotificationInput{{EventID: fmt.Sprint("warm-", i),
				Type: "state_changed", SensorID: "warmdoor", Data: &data, At: time.Now()}})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatalf("warming the fan-out's connections: %v", err)
		}
	}
}

// recordWindow starts `perf record -a -g` of the whole machine (every process:
// the api, this one, Postgres; the kernel's part included) for 1.2 s, when
// LOCKSTREAM_BENCH_PERF_DIR names a folder for its perf.data, and returns once
// it records (the event's write begins 0.3 s into it); the function it returns
// waits for perf to end.
func recordWindow(b *testing.B) func() {
	b.Helper()
	dir := os.Getenv("LOCKSTREAM_BENCH_PERF_DIR")
	if dir == "" {
		return func() {}
	}
	cmd := exec.Command("perf", "record", "-a", "-g", "-F", "2999", "-o", filepath.Join(dir, "perf.data"), "--", "sleep", "1.2")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	return func() { _ = cmd.Wait() }
}

// listenInbox listens on inbox.Channel on a connection of its own, as the api
// process's hub does, and returns a function that stops it and reports when
// the first and the last payload arrived (the event's commit as a listener
// sees it).
func listenInbox(ctx context.Context, b *testing.B, pgURL string) func() (first, last time.Time) {
	b.Helper()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+inbox.Channel); err != nil {
		b.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	var firstAt, lastAt time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := conn.WaitForNotification(lctx); err != nil {
				return
			}
			lastAt = time.Now()
			if firstAt.IsZero() {
				firstAt = lastAt
			}
		}
	}()
	return func() (time.Time, time.Time) {
		cancel()
		<-done
		_ = conn.Close(ctx)
		return firstAt, lastAt
	}
}

// cpuOf is the CPU time (user and system) process pid has used so far, from
// /proc (in clock ticks of 10 ms); zero when it is gone.
func cpuOf(pid int) time.Duration {
	t, _ := processCPU(pid)
	return t
}

// backendsCPU is the CPU time each Postgres backend of conn's database has used
// so far, by pid.
func backendsCPU(ctx context.Context, b *testing.B, conn *pgx.Conn) map[int]time.Duration {
	b.Helper()
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	out := map[int]time.Duration{}
	for _, pid := range pids {
		out[int(pid)] = cpuOf(int(pid))
	}
	return out
}

// cpuSince is what the backends of after used since before (a backend that
// started since counts from zero).
func cpuSince(before, after map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range after {
		d += t - before[pid]
	}
	return d
}

// startAPIProcess builds lockstream and runs `lockstream api` on the stores,
// returning its base URL once ready and its process id; the process is
// killed when b ends.
func startAPIProcess(b *testing.B, stores *storagetest.Stores) (string, int) {
	b.Helper()
	dir := b.TempDir()
	bin := filepath.Join(dir, "lockstream")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/lockstream").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	addr := freeLoopbackAddr(b)
	cmd := exec.Command(bin, "api")
	cmd.Env = append(os.Environ(), "LOCKSTREAM_PG_URL="+stores.PostgresURL, "LOCKSTREAM_CLICKHOUSE_URL="+stores.ClickHouseURL,
		"LOCKSTREAM_REDIS_URL="+stores.RedisURL, "LOCKSTREAM_REDIS_PREFIX="+stores.RedisPrefix,
		"LOCKSTREAM_HTTP_ADDR="+addr, "LOCKSTREAM_ADMIN_TOKEN=bench-admin-token", "LOCKSTREAM_LOG_LEVEL=warn",
		"LOCKSTREAM_DATA_DIR="+dir) // its generated secret key, not in the package's folder
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	api := "http://" + addr
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(api + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return api, cmd.Process.Pid
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("lockstream api not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freeLoopbackAddr(b *testing.B) string {
	b.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close()
	return addr
}

// takeTicket takes a stream ticket for seeded member i.
func takeTicket(client *http.Client, api string, i int) (string, error) {
	req, _ := http.NewRequest("POST", api+"/v1/stream/tickets", nil)
	req.Header.Set("Authorization", "Bearer lsm_bench"+strconv.Itoa(i))
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var t struct {
		Ticket string `json:"ticket"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&t); err != nil || t.Ticket == "" {
		return "", fmt.Errorf("ticket %d: %s %v", i, resp.Status, err)
	}
	return t.Ticket, nil
}

// readOneMessage opens a stream, calls hello once its hello arrived and got
// when its first message does, then reads on until ctx ends.
func readOneMessage(ctx context.Context, client *http.Client, api, ticket string, hello func(), got func(time.Time)) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", api+"/v1/stream?ticket="+url.QueryEscape(ticket), nil)
	resp, err := client.Do(req)
	if err != nil {
		hello()
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		hello()
		return fmt.Errorf("GET /v1/stream: %s", resp.Status)
	}
	r := bufio.NewReader(resp.Body)
	helloed, messaged := false, false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if !helloed {
				hello()
			}
			if err == io.EOF || ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch {
		case !helloed && line == "event: hello\n":
			helloed = true
			hello()
		case !messaged && line == "event: message\n":
			messaged = true
			got(time.Now())
		}
	}
}

// processMemory is what the api process's /metrics says of its memory.
type processMemory struct {
	rss, goBytes, stack, goroutines int64
}

func apiMemory(b *testing.B, api string) processMemory {
	b.Helper()
	m := scrape(b, api)
	return processMemory{rss: int64(m["process_resident_memory_bytes"]),
		goBytes: int64(m["go_memstats_heap_inuse_bytes"] + m["go_memstats_stack_inuse_bytes"]),
		stack:   int64(m["go_memstats_stack_inuse_bytes"]), goroutines: int64(m["go_goroutines"])}
}

// scrape reads the unlabelled series of the api process's /metrics.
func scrape(b *testing.B, api string) map[string]float64 {
	b.Helper()
	resp, err := http.Get(api + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// waitFor polls cond until it holds, failing b after limit.
func waitFor(b *testing.B, what string, limit time.Duration, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("no %s within %v", what, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitMetric(b *testing.B, api, name string, want float64) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for scrape(b, api)[name] != want {
		if time.Now().After(deadline) {
			b.Fatalf("%s = %v, want %v", name, scrape(b, api)[name], want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// BenchmarkStreamLatency times one member's live stream, event by event: each
// iteration is one sensor event written as the fan-out writes it
// (fanout.PostgresStore.CreateNotifications: the notification, its delivery and the
// member's inbox message in one transaction, whose NOTIFY reaches the hub),
// and the time from the start of that write until the message arrives on the
// member's stream, served by the real webapi handler and hub over HTTP. It
// reports p50, p99 and max of event → arrival, and logs those of the write's
// return → arrival (negative when the stream had the message before the
// writer's call returned: the NOTIFY goes out at commit). One warm-up event
// goes first, untimed.
//
//	go test -run '^$' -bench StreamLatency -benchtime 500x ./bench/
func BenchmarkStreamLatency(b *testing.B) {
	stores := storagetest.New(b)
	ctx := context.Background()
	pg := stores.Postgres
	if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: "latencydoor", Address: "1 Bench Street"}); err != nil {
		b.Fatal(err)
	}
	client, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "bench", WebhookURL: "https://example.com/h", Secret: "whsec_x"})
	if err != nil {
		b.Fatal(err)
	}
	if err := registry.New(pg).LinkSensor(ctx, client.ID, "latencydoor"); err != nil {
		b.Fatal(err)
	}
	const token = "lsm_latency"
	hash := sha256.Sum256([]byte(token))
	if _, _, err := registry.New(pg).CreateMember(ctx, registry.Member{ClientID: client.ID, Name: "reader", Timezone: "UTC",
		Preferences: registry.DefaultMemberPreferences()}, hash[:], registry.Backfill{}); err != nil {
		b.Fatal(err)
	}
	api := startInboxServer(b, stores)
	arrivals := openTimedStream(b, api, token)

	var event int
	flip := func() (start, returned time.Time) {
		b.Helper()
		event++
		data := event % 2
		start = time.Now()
		created, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, []storage.NotificationInput{{EventID: fmt.Sprint("latency-", event),
			Type: "state_changed", SensorID: "latencydoor", Data: &data, At: start}})
		if err != nil || created.InboxMessages != 1 {
			b.Fatalf("event %d: %d inbox messages, %v", event, created.InboxMessages, err)
		}
		return start, time.Now()
	}
	arrival := func(seq int64) time.Time {
		b.Helper()
		select {
		case a, ok := <-arrivals:
			if !ok || a.seq != seq {
				b.Fatalf("stream: message %d (open %v), want %d", a.seq, ok, seq)
			}
			return a.at
		case <-time.After(time.Minute): // a hang guard, not a measure
			b.Fatalf("message %d not on the stream after a minute", seq)
		}
		return time.Time{}
	}
	flip()
	arrival(1)

	fromEvent := make([]time.Duration, 0, b.N)
	fromReturn := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start, returned := flip()
		at := arrival(int64(i + 2))
		fromEvent = append(fromEvent, at.Sub(start))
		fromReturn = append(fromReturn, at.Sub(returned))
	}
	b.StopTimer()
	ev, re := percentiles(fromEvent), percentiles(fromReturn)
	b.ReportMetric(ev(0.5), "event-p50-ms")
	b.ReportMetric(ev(0.99), "event-p99-ms")
	b.ReportMetric(ev(1), "event-max-ms")
	b.Logf("%d events: event → stream p50 %.2f ms, p99 %.2f ms, max %.2f ms; write returned → stream p50 %.2f ms, p99 %.2f ms, max %.2f ms",
		len(fromEvent), ev(0.5), ev(0.99), ev(1), re(0.5), re(0.99), re(1))
}

// startInboxServer serves the API with members, inboxes and streams on the
// stores over HTTP, its stream hub running, until b ends.
func startInboxServer(b *testing.B, stores *storagetest.Stores) string {
	b.Helper()
	reg := prometheus.NewRegistry()
	server, err := webapi.New(webapi.Config{AdminToken: "bench-admin-token"}, stores.Registry, nil, reg, reg,
		slog.New(slog.DiscardHandler), webapi.WithInbox(stores.Registry, live.NewPostgresStore(stores.Postgres), stores.Redis, webapi.InboxConfig{}))
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(server.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.RunStreams(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("RunStreams: %v", err)
		}
		ts.Close()
	})
	return ts.URL
}

// streamArrival is a message's seq and when its stream delivered it.
type streamArrival struct {
	seq int64
	at  time.Time
}

// openTimedStream opens the member's stream once the hub runs (a 503 before),
// reads its hello, and then sends each message's seq and arrival time, taken
// as its last line is read, until b ends.
func openTimedStream(b *testing.B, api, token string) <-chan streamArrival {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var resp *http.Response
	waitFor(b, "the stream to open", time.Minute, func() bool {
		req, _ := http.NewRequest("POST", api+"/v1/stream/tickets", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		tr, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var t struct {
			Ticket string `json:"ticket"`
		}
		err = json.NewDecoder(tr.Body).Decode(&t)
		tr.Body.Close()
		if err != nil || t.Ticket == "" {
			b.Fatalf("POST /v1/stream/tickets: %s %v", tr.Status, err)
		}
		sreq, _ := http.NewRequestWithContext(ctx, "GET", api+"/v1/stream?ticket="+url.QueryEscape(t.Ticket), nil)
		if resp, err = http.DefaultClient.Do(sreq); err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			resp.Body.Close()
			return false
		}
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET /v1/stream: %s", resp.Status)
		}
		return true
	})
	out := make(chan streamArrival, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		var event, id string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "" && event == "message":
				seq, err := strconv.ParseInt(id, 10, 64)
				if err != nil {
					return
				}
				select {
				case out <- streamArrival{seq: seq, at: time.Now()}:
				case <-ctx.Done():
					return
				}
				event, id = "", ""
			case line == "":
				event, id = "", ""
			case strings.HasPrefix(line, "event: "):
				event = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				id = line[len("id: "):]
			}
		}
	}()
	b.Cleanup(func() {
		cancel()
		<-done
	})
	return out
}
