package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/migrations"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// The fleet of the analytics benchmark: fleetSensors sensors (s100000 …
// s199999), fleetReadings readings (1,000 a sensor, one at a random second of
// each 7,776 s slot) and fleetEvents events (100 a sensor, one in each
// 77,760 s slot, cycling unlock, loss, restore, lock) over the 90 days from
// fleetStart.
const (
	fleetSensors  = 100_000
	fleetReadings = 100_000_000
	fleetEvents   = 10_000_000
	fleetDays     = 90
)

var fleetStart = time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC)

// fleetSQL writes the fleet's history straight into ClickHouse, inside
// ClickHouse (INSERT … SELECT from numbers): the rollups' materialized views
// fill events_hourly and readings_hourly as they would from the history
// writer's inserts.
func fleetSQL() []string {
	start := fleetStart.Unix()
	return []string{
		fmt.Sprintf(`INSERT INTO events (id, type, sensor_id, data, previous, at)
		SELECT toString(number),
		  multiIf(j %% 4 = 0, 'state_changed', j %% 4 = 1, 'connection_lost', j %% 4 = 2, 'connection_restored', 'state_changed'),
		  concat('s', toString(100000 + i)),
		  multiIf(j %% 4 = 0, toNullable(toInt8(0)), j %% 4 = 3, toNullable(toInt8(1)), NULL),
		  multiIf(j = 0, NULL, j %% 4 = 0, toNullable(toInt8(1)), j %% 4 = 3, toNullable(toInt8(0)), NULL),
		  toDateTime(%d + j * 77760 + cityHash64(number) %% 77760)
		FROM (SELECT number, number %% %d AS i, intDiv(number, %[2]d) AS j FROM system.numbers LIMIT %d)`,
			start, fleetSensors, fleetEvents),
		fmt.Sprintf(`INSERT INTO readings (sensor_id, data, ts, received_at, kafka_partition, kafka_offset)
		SELECT concat('s', toString(100000 + i)), toUInt8(k %% 2), toDateTime(%d + k * 7776 + cityHash64(number) %% 7776) AS t, t,
		  toInt32(i %% 12), toInt64(number)
		FROM (SELECT number, number %% %d AS i, intDiv(number, %[2]d) AS k FROM system.numbers LIMIT %d)`,
			start, fleetSensors, fleetReadings),
	}
}

// fleetStores returns a Postgres with the fleet's sensors registered, its URL,
// and the URL of a ClickHouse database holding its history: the database at
// LOCKSTREAM_BENCH_FLEET_CLICKHOUSE_URL when set (filled by an earlier run and
// kept: filling takes half an hour on two busy cores), else a fresh one of the
// benchmark's, filled now.
func fleetStores(b *testing.B) (*storage.Postgres, string, string) {
	b.Helper()
	ctx := context.Background()
	pgURL := storagetest.NewPostgresDatabase(b)
	chURL, fill := os.Getenv("LOCKSTREAM_BENCH_FLEET_CLICKHOUSE_URL"), false
	if chURL == "" {
		chURL, fill = storagetest.NewClickHouseDatabase(b), true
	}
	if err := migrations.Migrate(ctx, pgURL, chURL, discardLogger()); err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `
		INSERT INTO sensors (id, address, site)
		SELECT 's' || (100000 + i), 'door ' || i, 'site' || (i % 1000) FROM generate_series(0, $1 - 1) AS i`, fleetSensors); err != nil {
		b.Fatal(err)
	}
	pg, err := storage.OpenPostgres(ctx, pgURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pg.Close)
	if fill {
		opts, err := clickhouse.ParseDSN(chURL)
		if err != nil {
			b.Fatal(err)
		}
		opts.Settings = clickhouse.Settings{"max_insert_block_size": 1 << 20}
		ch, err := clickhouse.Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		defer ch.Close()
		start := time.Now()
		for _, q := range fleetSQL() {
			if err := ch.Exec(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
		b.Logf("fleet written in %s", time.Since(start).Round(time.Second))
	}
	sealFleet(b, chURL)
	return pg, pgURL, chURL
}

// sealFleet seals the fleet's hours as the maintainer's passes do (the first
// time every hour of the 90 days: minutes; later runs find nothing to seal).
// The margin is 0: every insert of the fill has returned.
func sealFleet(b *testing.B, chURL string) {
	b.Helper()
	ctx := context.Background()
	ch, err := storage.OpenClickHouse(ctx, chURL)
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	start := time.Now()
	rep, err := analytics.New(ch.Conn(), nil, analytics.WithSealMargin(0)).SealRollups(ctx, fleetStart.AddDate(0, 0, fleetDays+1))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("sealed %d hours and %d level buckets (%d rollup and %d level rows corrected) in %s", rep.Hours, rep.LevelBuckets,
		rep.Corrected, rep.LevelCorrected, time.Since(start).Round(time.Second))
}

// BenchmarkAnalyticsFleet times the analysts' questions over a fleet of
// 100,000 sensors, 100,000,000 readings and 10,000,000 events in ClickHouse:
// fleet-wide Paris days over 30 days, one sensor's hours over 90 days, the top
// 20 by time lost over 30 days, each reporting p50, p99 and max in ms; and an
// export of fleet readings from a `lockstream api` process (HTTP, loopback,
// lines counted), reporting rows/s and that process's peak RSS.
//
//	LOCKSTREAM_BENCH_FLEET_CLICKHOUSE_URL=clickhouse://127.0.0.1:9000/lst_anbench \
//	  go test -run '^$' -bench AnalyticsFleet -benchtime 20x -timeout 90m ./bench/
func BenchmarkAnalyticsFleet(b *testing.B) {
	pg, pgURL, chURL := fleetStores(b)
	ctx := context.Background()
	ch, err := storage.OpenClickHouse(ctx, chURL)
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	scopes := analytics.NewPostgresScopes(pg.Pool())
	st := analytics.New(ch.Conn(), scopes, analytics.WithClock(func() time.Time { return fleetStart.AddDate(0, 0, fleetDays) }))
	paris, _ := time.LoadLocation("Europe/Paris")
	end := time.Date(2026, 9, 28, 0, 0, 0, 0, paris)
	fleet := analytics.Scope{Kind: analytics.ScopeFleet}

	top20 := analytics.TopQuery{Scope: fleet, From: end.AddDate(0, 0, -30), To: end, By: "lost_seconds", Limit: 20}
	checkTopAgainstRaw(b, st, analytics.New(ch.Conn(), scopes, analytics.WithClock(func() time.Time { return fleetStart.AddDate(0, 0, fleetDays) }),
		analytics.WithSource(analytics.SourceRaw)), top20)
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"fleet-days-30d", func() error {
			_, err := st.Summary(ctx, analytics.SummaryQuery{Scope: fleet, From: end.AddDate(0, 0, -30), To: end,
				Bucket: analytics.Bucket1d, Location: paris})
			return err
		}},
		{"sensor-hours-90d", func() error {
			_, err := st.Summary(ctx, analytics.SummaryQuery{Scope: analytics.Scope{Kind: analytics.ScopeSensor, ID: "s123456"},
				From: fleetStart, To: fleetStart.AddDate(0, 0, fleetDays), Bucket: analytics.Bucket1h, Location: paris})
			return err
		}},
		{"top20-lost-30d", func() error {
			_, err := st.Top(ctx, top20)
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			took := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			reportLatencies(b, took)
		})
	}
	b.Run("export-readings", func(b *testing.B) { benchExport(b, pgURL, chURL, end) })
}

// checkTopAgainstRaw checks once, untimed, that the top list the benchmark
// times (through the levels) is the one raw rows alone give.
func checkTopAgainstRaw(b *testing.B, st, raw *analytics.Store, q analytics.TopQuery) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	want, err := raw.Top(ctx, q)
	if err != nil {
		b.Fatal(err)
	}
	got, err := st.Top(ctx, q)
	if err != nil {
		b.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		b.Fatalf("top list through the levels %v, from raw rows %v", got, want)
	}
	b.Logf("top %d by %s equals the raw rows' (%v, raw rows in %s)", q.Limit, q.By, got[:min(3, len(got))], time.Since(start).Round(time.Second))
}

func reportLatencies(b *testing.B, took []time.Duration) {
	slices.Sort(took)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(took[len(took)/2]), "p50-ms")
	b.ReportMetric(ms(took[(len(took)*99+99)/100-1]), "p99-ms")
	b.ReportMetric(ms(took[len(took)-1]), "max-ms")
}

// benchExport exports 3 days of fleet readings (about 3.3 million rows) as CSV
// from a `lockstream api` process of its own, over HTTP on loopback, and
// reports rows/s and that process's peak RSS: its VmHWM read from /proc
// after each export (the kernel's high-water mark covers every moment of it),
// with the VmHWM it had when ready beside it.
func benchExport(b *testing.B, pgURL, chURL string, end time.Time) {
	api, pid := startAPIProcess(b, &storagetest.Stores{PostgresURL: pgURL, ClickHouseURL: chURL,
		RedisURL: storagetest.RedisURL(b), RedisPrefix: storagetest.NewRedisPrefix(b)})
	ready, cpu0 := peakRSS(b, pid), cpuSeconds(b, pid)
	from := end.AddDate(0, 0, -3)
	url := fmt.Sprintf("%s/v1/analytics/export?scope=fleet&kind=readings&from=%s&to=%s", api,
		from.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))
	var rows int64
	start := time.Now()
	for b.Loop() {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer bench-admin-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := countLines(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("export: %d, %v", resp.StatusCode, err)
		}
		rows += n - 1
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(rows)/elapsed.Seconds(), "rows/s")
	b.ReportMetric((cpuSeconds(b, pid)-cpu0)/float64(b.N), "api-cpu-s/export")
	b.ReportMetric(float64(peakRSS(b, pid))/(1<<20), "api-peak-rss-MiB")
	b.ReportMetric(float64(ready)/(1<<20), "api-ready-rss-MiB")
	b.ReportMetric(float64(rows)/float64(b.N), "rows/export")
}

func countLines(r io.Reader) (int64, error) {
	buf := make([]byte, 256<<10)
	var n int64
	for {
		k, err := r.Read(buf)
		n += int64(bytes.Count(buf[:k], []byte{'\n'}))
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// cpuSeconds is the user and system CPU time process pid has used (Linux,
// /proc/PID/stat, in clock ticks of 1/100 s).
func cpuSeconds(b *testing.B, pid int) float64 {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the line.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %v %v", pid, err1, err2)
	}
	return float64(utime+stime) / 100
}

// peakRSS is process pid's VmHWM in bytes (Linux).
func peakRSS(b *testing.B, pid int) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
