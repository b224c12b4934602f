package bench

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
)

// listFleet is how many registered sensors BenchmarkSensorListPage lists; every one
// of them is lost, so a page of connection=lost is a page of the whole lost set.
const listFleet = 10_000

// BenchmarkSensorListPage measures a page of 100 of GET /v1/sensors and of
// GET /v1/sensors?connection=lost through the real HTTP stack, with 10,000
// registered sensors, all lost, in a real Postgres and Redis; the API's heartbeat
// tracker reaches Redis through a TCP proxy that counts round trips. Reports ms per
// page and Redis round trips per page (the Postgres query is one more).
//
//	go test -run '^$' -bench SensorListPage -benchtime 200x ./bench/
func BenchmarkSensorListPage(b *testing.B) {
	ctx := context.Background()
	stores := storagetest.New(b)
	raw := rawRedis(b, stores.RedisURL)
	base := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Second)
	deadlines := make([]heartbeat.Deadline, listFleet)
	for i := range deadlines {
		id := sensorID(i)
		if _, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: id, Address: "bench street"}); err != nil {
			b.Fatal(err)
		}
		deadlines[i] = heartbeat.Deadline{SensorID: id, Deadline: base.Add(time.Duration(i) * time.Millisecond)}
	}
	if _, err := heartbeat.NewRedisStore(stores.Redis).LoadHeartbeatDeadlines(ctx, deadlines); err != nil {
		b.Fatal(err)
	}
	for lost := 0; lost < listFleet; {
		claimed, err := heartbeat.NewRedisStore(stores.Redis).ClaimHeartbeatExpired(ctx, time.Now(), heartbeat.MaxBatch, time.Now().Add(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		lost += len(claimed)
	}
	indexBytes, err := raw.MemoryUsage(ctx, stores.RedisPrefix+"{heartbeat}:lost-ids", 0).Result()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("the lost index takes %.1f B per lost sensor", float64(indexBytes)/listFleet)

	proxy := newCountingProxy(b, raw.Options().Addr)
	viaProxy, err := storage.OpenRedis(ctx, "redis://"+proxy.addr+"/0", stores.RedisPrefix)
	if err != nil {
		b.Fatal(err)
	}
	defer viaProxy.Close()
	tracker, err := heartbeat.NewTracker(heartbeat.Config{}, heartbeat.NewRedisStore(viaProxy), heartbeat.NewPostgresStore(stores.Postgres), prometheus.NewRegistry(), discardLogger())
	if err != nil {
		b.Fatal(err)
	}
	const token = "bench-admin-token"
	reg := prometheus.NewRegistry()
	server, err := webapi.New(webapi.Config{AdminToken: token}, stores.Registry, nil, reg, reg, discardLogger(),
		webapi.WithSensorStatus(tracker), webapi.WithLostSensors(tracker))
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(server.Handler())
	defer ts.Close()
	get := func(b *testing.B, path string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+path, nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := ts.Client().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s = %d", path, resp.StatusCode)
		}
	}
	for _, c := range []struct{ name, query string }{{"All", ""}, {"Lost", "&connection=lost"}} {
		b.Run(c.name, func(b *testing.B) {
			get(b, "/v1/sensors?limit=100"+c.query) // warm-up: connections, timeouts
			before := proxy.roundTrips.Load()
			page := 0
			for b.Loop() {
				// Pages spread over the whole list: each starts after another sensor.
				after := sensorID((page * 137) % (listFleet - 100))
				page++
				get(b, fmt.Sprintf("/v1/sensors?limit=100&cursor=%s%s", cursorOf(after), c.query))
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/page")
			b.ReportMetric(float64(proxy.roundTrips.Load()-before)/float64(b.N), "redis-round-trips/page")
		})
	}
}

// cursorOf is the API's cursor after the sensor id.
func cursorOf(id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(id))
}
