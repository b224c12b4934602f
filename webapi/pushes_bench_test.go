package webapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
)

// BenchmarkLegacyPushReceive measures POST /push on loopback, from sending the
// request to reading the empty 200, the push stored durably in Postgres in
// between; it reports the p50 and p99 of those receive latencies. The old
// service took 50-200 ms on average.
func BenchmarkLegacyPushReceive(b *testing.B) {
	stores := storagetest.New(b)
	reg := prometheus.NewRegistry()
	server, err := webapi.New(webapi.Config{AdminToken: testToken, PushToken: testPushToken}, stores.Registry, nil,
		reg, reg, slog.New(slog.NewTextHandler(io.Discard, nil)), webapi.WithPushes(stores.Postgres, stores.Postgres))
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(server.Handler())
	b.Cleanup(ts.Close)
	body, err := json.Marshal(pushRequest(nil))
	if err != nil {
		b.Fatal(err)
	}
	client := ts.Client()
	latencies := make([]time.Duration, 0, b.N)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		req, err := http.NewRequestWithContext(ctx, "POST", ts.URL+"/push", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testPushToken)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		latencies = append(latencies, time.Since(start))
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("POST /push = %d", resp.StatusCode)
		}
	}
	b.StopTimer()
	slices.Sort(latencies)
	quantile := func(q float64) float64 {
		return float64(latencies[int(q*float64(len(latencies)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(quantile(0.50), "p50-ms")
	b.ReportMetric(quantile(0.99), "p99-ms")
}
