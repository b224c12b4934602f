// Package bench holds lockstream's end-to-end benchmarks, each against real stores.
package bench

import (
	"bytes"
	"context"
	"fmt"
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

// BenchmarkCreateSensor POSTs distinct sensors, one at a time, through the real HTTP
// stack (a loopback httptest.Server with keep-alive) into a real, private Postgres
// database, and reports the p99 latency of a request besides ns/op.
//
//	go test -run '^$' -bench CreateSensor -benchtime 5000x ./bench/
func BenchmarkCreateSensor(b *testing.B) {
	stores := storagetest.New(b)
	reg := prometheus.NewRegistry()
	const token = "bench-admin-token"
	server, err := webapi.New(webapi.Config{AdminToken: token}, stores.Registry, nil, reg, reg,
		slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(server.Handler())
	defer ts.Close()
	client := ts.Client()
	ctx := context.Background()

	// Ids are unique across the calibration runs the benchmark framework may make.
	run := time.Now().UnixNano() % 1_000_000
	latencies := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		body := fmt.Appendf(nil, `{"id":"b%dn%d","address":"bench street %d"}`, run, i, i)
		i++
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/sensors", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")

		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, copyErr := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		latencies = append(latencies, time.Since(start))
		if copyErr != nil {
			b.Fatal(copyErr)
		}
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("POST /v1/sensors = %d", resp.StatusCode)
		}
	}
	b.StopTimer()

	slices.Sort(latencies)
	p99 := latencies[(len(latencies)*99+99)/100-1]
	b.ReportMetric(float64(p99)/float64(time.Millisecond), "p99-ms")
}
