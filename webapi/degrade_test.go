package webapi_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
)

// proxy forwards TCP connections from its address to target, once started: until
// then nothing listens there and connections are refused.
type proxy struct {
	t      *testing.T
	addr   string
	target string
	wg     sync.WaitGroup
}

// newRefusingAddr returns a loopback address that refuses connections, to be
// brought up later by start.
func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, addr: ln.Addr().String(), target: target}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// start listens on the proxy's address and forwards every connection to target;
// hang instead accepts connections and never answers.
func (p *proxy) start(hang bool) {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("listening again on %s: %v", p.addr, err)
	}
	done := make(chan struct{})
	p.t.Cleanup(func() {
		close(done)
		_ = ln.Close()
		p.wg.Wait()
	})
	p.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.serve(conn, hang, done) })
		}
	})
}

func (p *proxy) serve(conn net.Conn, hang bool, done chan struct{}) {
	defer conn.Close()
	if hang {
		<-done
		return
	}
	upstream, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer upstream.Close()
	var copies sync.WaitGroup
	copies.Go(func() { _, _ = io.Copy(upstream, conn); _ = upstream.Close() })
	copies.Go(func() { _, _ = io.Copy(conn, upstream); _ = conn.Close() })
	go func() { <-done; _ = conn.Close(); _ = upstream.Close() }()
	copies.Wait()
}

// clickHouseThrough returns a lazily connecting ClickHouse store on the test's own
// database, reached through p.
func clickHouseThrough(t *testing.T, stores *storagetest.Stores, p *proxy) *storage.ClickHouse {
	t.Helper()
	u, err := url.Parse(stores.ClickHouseURL)
	if err != nil {
		t.Fatal(err)
	}
	p.target = u.Host
	u.Host = p.addr
	ch, err := storage.OpenClickHouseLazy(u.String() + "?dial_timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

func newDegradedAPI(t *testing.T, cfg webapi.Config, ch *storage.ClickHouse, stores *storagetest.Stores) *testAPI {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.AdminToken = testToken
	checks := map[string]webapi.Pinger{"postgres": stores.Postgres, "redis": stores.Redis, "clickhouse": ch}
	server, err := webapi.New(cfg, stores.Registry, checks, reg, reg, slog.New(slog.NewTextHandler(io.Discard, nil)),
		webapi.WithHistory(analytics.New(ch.Conn(), nil)), webapi.WithDeliveries(stores.Postgres, ch),
		webapi.WithAnalytics(analytics.New(ch.Conn(), analytics.NewPostgresScopes(stores.Postgres.Pool()))))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.Handler())
	t.Cleanup(ts.Close)
	return &testAPI{t: t, url: ts.URL, stores: stores, registry: reg, server: server}
}

// expectUnavailable checks a 503 problem naming ClickHouse, with Retry-After.
func expectUnavailable(t *testing.T, resp *response) {
	t.Helper()
	resp.expectProblem(http.StatusServiceUnavailable, "unavailable", "clickhouse")
	if resp.header.Get("Retry-After") == "" {
		t.Fatalf("503 without Retry-After: %v", resp.header)
	}
}

// The API runs while ClickHouse refuses connections: the history routes answer
// 503 problems with Retry-After, /readyz names ClickHouse, the registry works; once
// ClickHouse is back, the same server answers from it.
func TestHistoryDegradesWhileClickHouseIsDown(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	p := newProxy(t, "")
	ch := clickHouseThrough(t, stores, p)
	api := newDegradedAPI(t, webapi.Config{}, ch, stores)

	expectUnavailable(t, api.request("GET", "/v1/sensors/lock1/events", nil))
	expectUnavailable(t, api.request("GET", "/v1/sensors/lock1/readings", nil))
	ready := api.request("GET", "/readyz", nil).expectProblem(http.StatusServiceUnavailable, "not-ready", "clickhouse")
	if ready.Checks["clickhouse"] != "down" || ready.Checks["postgres"] != "ok" || strings.Contains(ready.Detail, "postgres") {
		t.Fatalf("readyz while ClickHouse is down: %+v", ready)
	}
	api.createSensor("lock1", "1 Main St")
	api.request("GET", "/v1/sensors/lock1", nil).expect(http.StatusOK)
	for _, route := range []string{"summary", "top?by=changes&", "export?kind=events&"} {
		if !strings.Contains(route, "?") {
			route += "?"
		}
		expectUnavailable(t, api.request("GET", "/v1/analytics/"+route+"scope=sensor:lock1", nil))
	}

	p.start(false)
	waitFor(t, "readyz to report ClickHouse back", func() bool {
		return api.request("GET", "/readyz", nil).status == http.StatusOK
	})
	var events itemsJSON[historyEventJSON]
	api.request("GET", "/v1/sensors/lock1/events", nil).expect(http.StatusOK).decode(&events)
	api.request("GET", "/v1/sensors/lock1/readings", nil).expect(http.StatusOK)
	api.request("GET", "/v1/analytics/summary?scope=sensor:lock1", nil).expect(http.StatusOK)
}

// A ClickHouse that accepts connections and never answers holds a history request
// for the dial timeout (the handshake does not heed the request's context), then
// the answer is a 503 problem, not a hung request.
func TestHistoryAnswersWhileClickHouseHangs(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	p := newProxy(t, "")
	ch := clickHouseThrough(t, stores, p)
	p.start(true)
	api := newDegradedAPI(t, webapi.Config{}, ch, stores)
	expectUnavailable(t, api.request("GET", "/v1/sensors/lock1/events", nil))
}

// waitFor polls cond until it holds, failing t after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
