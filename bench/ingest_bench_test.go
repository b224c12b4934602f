package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
)

// BenchmarkIngest runs the ingest benchmark (produce, seed, bare consume, full
// state consumer, history writer) against an embedded broker of its own (kfake
// with a data directory, as `lockstream all` starts it) and the local Postgres and
// ClickHouse, and reports the rates. Its defaults are the stream issue's
// configuration; the environment changes them:
//
//	LOCKSTREAM_BENCH_READINGS      readings produced (default 5,000,000)
//	LOCKSTREAM_BENCH_SENSORS       sensors (default 1,000,000)
//	LOCKSTREAM_BENCH_CHANGE_RATE   change probability per reading (default 0.01)
//	LOCKSTREAM_BENCH_MAX_POLL_RECORDS  the state consumer's MaxPollRecords (default: its own)
//	LOCKSTREAM_BENCH_COLD_START    if set, sensor_state starts empty (IngestConfig.ColdStart)
//	LOCKSTREAM_BENCH_PROFILE_DIR   if set, a CPU profile per phase goes there
//	                               (bare.pprof, full.pprof, history.pprof, …)
//
// One run is one iteration:
//
//	go test -run '^$' -bench Ingest -benchtime 1x -timeout 30m ./bench/
func BenchmarkIngest(b *testing.B) {
	ctx := context.Background()
	cfg := IngestConfig{
		Readings:       envInt(b, "LOCKSTREAM_BENCH_READINGS", 5_000_000),
		Sensors:        envInt(b, "LOCKSTREAM_BENCH_SENSORS", 1_000_000),
		ChangeRate:     envFloat(b, "LOCKSTREAM_BENCH_CHANGE_RATE", DefaultIngestChangeRate),
		MaxPollRecords: envInt(b, "LOCKSTREAM_BENCH_MAX_POLL_RECORDS", 0),
		ColdStart:      os.Getenv("LOCKSTREAM_BENCH_COLD_START") != "",
		Timeout:        DefaultIngestTimeout,
	}.WithDefaults()
	profiles := os.Getenv("LOCKSTREAM_BENCH_PROFILE_DIR")
	for range b.N {
		b.StopTimer()
		stores := storagetest.New(b)
		broker, err := stream.StartEmbedded(ctx, b.TempDir(), "127.0.0.1:0", stream.DefaultPartitions)
		if err != nil {
			b.Fatal(err)
		}
		cfg.Stream.Brokers = broker.Addrs()
		cfg.History = history.NewClickHouseStore(stores.ClickHouse)
		run, err := newIngestRun(ctx, cfg, NewPostgresStore(stores.Postgres), slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for _, phase := range run.phases() {
			stop := startProfile(b, profiles, phase.name)
			before, start := cpuTimes(), time.Now()
			err := phase.run(ctx)
			wall, after := time.Since(start), cpuTimes()
			stop()
			if err != nil {
				b.Fatalf("%s: %v", phase.name, err)
			}
			// Where the CPU went. On two shared cores other work shows as the gap
			// between wall time and these; the server figures count other
			// clients' queries too, and a server process that exits during the
			// phase drops out (hence an occasional negative figure).
			b.Logf("%-8s wall %6.2fs  cpu: this process %6.2fs, postgres %6.2fs, clickhouse %6.2fs",
				phase.name, wall.Seconds(), after.self-before.self, after.postgres-before.postgres,
				after.clickhouse-before.clickhouse)
		}
		b.StopTimer()
		run.close()
		broker.Close()
		res := run.res
		if res.Changes != res.ExpectedChanges {
			b.Fatalf("consumer found %d changes, %d were produced", res.Changes, res.ExpectedChanges)
		}
		b.Logf("%+v", res)
		b.ReportMetric(res.BareRate, "bare-readings/s")
		b.ReportMetric(res.FullRate, "full-readings/s")
		b.ReportMetric(res.Ratio, "full/bare")
		b.ReportMetric(res.HistoryRate, "history-rows/s")
	}
}

// cpu is CPU seconds used so far: by this process and by every process of the
// local Postgres and ClickHouse servers (read from /proc; zero where it cannot be
// read).
type cpu struct {
	self, postgres, clickhouse float64
}

func cpuTimes() cpu {
	var c cpu
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		stat, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid … utime stime: the 14th and 15th fields.
		open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || end < open {
			continue
		}
		comm, fields := string(stat[open+1:end]), strings.Fields(string(stat[end+1:]))
		if len(fields) < 13 {
			continue
		}
		utime, _ := strconv.ParseFloat(fields[11], 64)
		stime, _ := strconv.ParseFloat(fields[12], 64)
		secs := (utime + stime) / clockTicks
		switch {
		case strings.HasPrefix(comm, "postgres"):
			c.postgres += secs
		case strings.HasPrefix(comm, "clickhouse"):
			c.clickhouse += secs
		}
	}
	return c
}

// clockTicks is Linux's USER_HZ, the unit of /proc/*/stat times.
const clockTicks = 100

// startProfile starts a CPU profile of phase in dir, if dir is set, and returns
// what stops it.
func startProfile(b *testing.B, dir, phase string) func() {
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, phase+".pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatal(fmt.Errorf("%s: %w", name, err))
	}
	return n
}

func envFloat(b *testing.B, name string, def float64) float64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		b.Fatal(fmt.Errorf("%s: %w", name, err))
	}
	return f
}
