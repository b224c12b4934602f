package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lockstream/lockstream/storage/storagetest"
)

// BenchmarkPipeline is `lockstream bench pipeline`'s twin: it builds the binary
// and runs the command — every daemon of `lockstream all` in that one process,
// on scratch databases next to a private Postgres and ClickHouse database, an
// embedded broker of its own — and reports the figures of its JSON report. The
// environment sizes it (defaults: the command's):
//
//	LOCKSTREAM_BENCH_SENSORS           fleet (100,000)
//	LOCKSTREAM_BENCH_LINKED            sensors the sink's client watches (20,000)
//	LOCKSTREAM_BENCH_READINGS          readings of the throughput phase (1,000,000)
//	LOCKSTREAM_BENCH_LATENCY_RATE      changes per second of the latency phase (1,000)
//	LOCKSTREAM_BENCH_LATENCY_DURATION  how long the latency phase produces (10s)
//	LOCKSTREAM_BENCH_PROFILE_DIR       if set, pipeline.pprof (CPU of the whole process) goes there
//
// Settings of the daemons (LOCKSTREAM_RETRY_WORKERS, ...) pass through the
// environment. One run is one iteration:
//
//	go test -run '^$' -bench Pipeline -benchtime 1x -timeout 30m ./bench/
func BenchmarkPipeline(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "lockstream")
	build := exec.Command("go", "build", "-o", bin, "github.com/lockstream/lockstream/cmd/lockstream")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building lockstream: %v\n%s", err, out)
	}
	args := []string{"bench", "pipeline",
		"--pg-url", storagetest.NewPostgresDatabase(b), "--clickhouse-url", storagetest.NewClickHouseDatabase(b),
		"--redis-url", storagetest.RedisURL(b), "--redis-prefix", storagetest.NewRedisPrefix(b),
		"--kafka-brokers", "", "--log-level", "warn"}
	for env, flag := range map[string]string{
		"LOCKSTREAM_BENCH_SENSORS": "--sensors", "LOCKSTREAM_BENCH_LINKED": "--linked",
		"LOCKSTREAM_BENCH_READINGS": "--readings", "LOCKSTREAM_BENCH_LATENCY_RATE": "--latency-rate",
		"LOCKSTREAM_BENCH_LATENCY_DURATION": "--latency-duration",
	} {
		if v := os.Getenv(env); v != "" {
			args = append(args, flag, v)
		}
	}
	if dir := os.Getenv("LOCKSTREAM_BENCH_PROFILE_DIR"); dir != "" {
		args = append(args, "--cpuprofile", filepath.Join(dir, "pipeline.pprof"))
	}
	for range b.N {
		var out, errOut bytes.Buffer
		cmd := exec.CommandContext(context.Background(), bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			b.Fatalf("lockstream bench pipeline: %v\n%s\n%s", err, errOut.String(), out.String())
		}
		var res PipelineResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			b.Fatalf("decoding the report: %v\n%s", err, out.String())
		}
		b.Logf("report:\n%s", out.String())
		b.ReportMetric(res.ReadingsPerSec, "readings/s")
		b.ReportMetric(res.Ratio, "ratio")
		b.ReportMetric(res.HistoryLagSeconds, "history-lag-s")
		b.ReportMetric(res.WebhooksPerSec, "webhooks/s")
		b.ReportMetric(res.LatencyP50Ms, "p50-ms")
		b.ReportMetric(res.LatencyP99Ms, "p99-ms")
		b.ReportMetric(res.LatencyMaxMs, "max-ms")
		b.ReportMetric(res.LoadBefore[0], "load-before")
		b.ReportMetric(res.LoadAfter[0], "load-after")
	}
	b.ReportMetric(0, "ns/op")
}
