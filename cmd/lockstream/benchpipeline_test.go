package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lockstream/lockstream/bench"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// TestBenchPipelineSmall runs `lockstream bench pipeline` in a small
// configuration: every daemon of `all` (through startAll) on scratch stores and
// an embedded broker of its own, a fleet of 1,000 sensors of which 300 are
// watched by a client whose webhook is the benchmark's sink. It checks
// correctness only, never speed: every change of the webhook and latency phases
// arrived exactly once, each watched sensor's newest change of the throughput
// phase arrived, no webhook came twice and every signature verified. The 300
// are shared by 3 clients, the last of which answers 500 from the second
// webhook phase on; the costs per webhook, the bare webhooks and the healthy
// clients' figures must be there and positive.
func TestBenchPipelineSmall(t *testing.T) {
	t.Parallel()
	res, out := smallPipeline(t, "--readings", "20000", "--change-rate", "0.02",
		"--clients", "3", "--failing-clients", "1")
	if res.Duplicates != 0 || res.BadSignatures != 0 {
		t.Errorf("duplicates %d, bad signatures %d; want 0 and 0", res.Duplicates, res.BadSignatures)
	}
	if res.Webhooks != 300 {
		t.Errorf("webhook phase: %d webhooks, want one per watched sensor (300)", res.Webhooks)
	}
	if res.LatencyChanges != 200 {
		t.Errorf("latency phase: %d webhooks, want 200 (100/s for 2 s)", res.LatencyChanges)
	}
	if res.ThroughputLinkedChanges == 0 || res.ThroughputWebhooks > res.ThroughputLinkedChanges {
		t.Errorf("throughput phase: %d webhooks for %d changes of watched sensors", res.ThroughputWebhooks, res.ThroughputLinkedChanges)
	}
	if res.BareReadings < 20000+1000+300+200 {
		t.Errorf("bare consume read %d readings, want every one produced", res.BareReadings)
	}
	positive := map[string]float64{
		"postgres_wal_bytes_per_webhook":          res.PostgresWALBytesPerWebhook,
		"postgres_statements_per_webhook":         res.PostgresStatementsPerWebhook,
		"postgres_cpu_ms_per_webhook":             res.PostgresCPUMsPerWebhook,
		"bare_webhooks_per_s":                     res.BareWebhooksPerSec,
		"webhook_ratio":                           res.WebhookRatio,
		"healthy_webhooks_per_second":             res.HealthyWebhooksPerSec,
		"healthy_webhooks_per_second_all_healthy": res.HealthyAllHealthyPerSec,
		"healthy_share":                           res.HealthyShare,
	}
	for name, v := range positive {
		if !(v > 0) {
			t.Errorf("%s = %v, want a positive figure", name, v)
		}
		if !strings.Contains(out, `"`+name+`"`) {
			t.Errorf("the report has no %s", name)
		}
	}
	if res.BareWebhooks != 300 {
		t.Errorf("bare webhooks verified at the sink: %d, want 300", res.BareWebhooks)
	}
	if res.HealthyWebhooks != 200 {
		t.Errorf("second webhook phase: %d webhooks at the healthy clients, want their 200 sensors'", res.HealthyWebhooks)
	}
	t.Logf("report (speed figures are not checked here):\n%s", out)
}

// TestBenchPipelinePostsSmall runs `lockstream bench pipeline --posts` small:
// 1,000 webhooks of history (every one of 300 watched sensors flipped, four
// rounds), then 100 single-reading POST /v1/readings a second for 2 s to the
// API of `all`. Correctness only: the history delivered, every post's webhook
// arrived once, signed, and the latency figures are there.
func TestBenchPipelinePostsSmall(t *testing.T) {
	t.Parallel()
	res, out := smallPipeline(t, "--posts", "--history", "1000")
	if res.Duplicates != 0 || res.BadSignatures != 0 {
		t.Errorf("duplicates %d, bad signatures %d; want 0 and 0", res.Duplicates, res.BadSignatures)
	}
	if res.HistoryWebhooks != 1200 {
		t.Errorf("history: %d webhooks, want 4 rounds of 300", res.HistoryWebhooks)
	}
	if res.PostChanges != 200 {
		t.Errorf("posts: %d webhooks, want 200 (100/s for 2 s)", res.PostChanges)
	}
	if !(res.PostP50Ms > 0 && res.PostP99Ms >= res.PostP50Ms && res.PostAnswerP99Ms > 0) {
		t.Errorf("post latency p50 %v, p99 %v, answer p99 %v: want positive figures", res.PostP50Ms, res.PostP99Ms, res.PostAnswerP99Ms)
	}
	t.Logf("report (speed figures are not checked here):\n%s", out)
}

// smallPipeline runs `lockstream bench pipeline` small (1,000 sensors, 300
// linked, 100 changes a second for 2 s) on private stores and kfake, with args
// added, and returns its decoded report and the report as printed.
func smallPipeline(t *testing.T, args ...string) (bench.PipelineResult, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"bench", "pipeline",
		"--pg-url", storagetest.NewPostgresDatabase(t), "--clickhouse-url", storagetest.NewClickHouseDatabase(t),
		"--redis-url", storagetest.RedisURL(t), "--redis-prefix", storagetest.NewRedisPrefix(t),
		"--kafka-brokers", "", "--kafka-partitions", "3", "--log-level", "warn",
		"--sensors", "1000", "--linked", "300",
		"--latency-rate", "100", "--latency-duration", "2s", "--timeout", "3m"}, args...), &out, &errOut)
	if code != 0 {
		t.Fatalf("bench pipeline %v exited %d:\n%s\n%s", args, code, errOut.String(), out.String())
	}
	var res bench.PipelineResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("decoding the report: %v\n%s", err, out.String())
	}
	return res, out.String()
}
