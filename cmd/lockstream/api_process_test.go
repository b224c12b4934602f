package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/lockstream/lockstream/storage/storagetest"
)

// `lockstream api` starts while ClickHouse refuses connections: /readyz names
// ClickHouse, the history routes answer 503 problems with Retry-After, the
// registry works. Started again with a ClickHouse that answers, history works.
func TestAPIStartsWhileClickHouseIsDown(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	downURL, err := url.Parse(stores.ClickHouseURL)
	if err != nil {
		t.Fatal(err)
	}
	downURL.Host = refusing

	const token = "api-process-admin-token"
	for _, phase := range []struct {
		name, clickHouseURL string
		up                  bool
	}{
		{"clickhouse down", downURL.String(), false},
		{"clickhouse up", stores.ClickHouseURL, true},
	} {
		addr := freeAddr(t)
		base := "http://" + addr
		h := newHarness(t,
			"LOCKSTREAM_PG_URL="+stores.PostgresURL, "LOCKSTREAM_CLICKHOUSE_URL="+phase.clickHouseURL,
			"LOCKSTREAM_REDIS_URL="+stores.RedisURL, "LOCKSTREAM_REDIS_PREFIX="+stores.RedisPrefix,
			"LOCKSTREAM_HTTP_ADDR="+addr, "LOCKSTREAM_ADMIN_TOKEN="+token, "LOCKSTREAM_DATA_DIR="+t.TempDir())
		p := h.start("api", "api")
		var ready struct {
			Detail string            `json:"detail"`
			Checks map[string]string `json:"checks"`
		}
		h.waitFor(phase.name+": /readyz to answer", func() (bool, string) {
			resp, err := http.Get(base + "/readyz")
			if err != nil {
				return false, err.Error()
			}
			defer resp.Body.Close()
			if err := json.NewDecoder(resp.Body).Decode(&ready); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
		if phase.up != (ready.Checks["clickhouse"] == "ok") || ready.Checks["postgres"] != "ok" || ready.Checks["redis"] != "ok" {
			t.Fatalf("%s: readyz = %+v", phase.name, ready)
		}
		if !phase.up && !strings.Contains(ready.Detail, "clickhouse") {
			t.Fatalf("%s: readyz does not name clickhouse: %+v", phase.name, ready)
		}

		get := func(path string) (*http.Response, string) {
			req, err := http.NewRequest(http.MethodGet, base+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: GET %s: %v", phase.name, path, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp, string(body)
		}
		if resp, body := get("/v1/sensors"); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: the registry answers %d: %s", phase.name, resp.StatusCode, body)
		}
		resp, body := get("/v1/sensors/lock1/events")
		switch {
		case phase.up && resp.StatusCode != http.StatusOK:
			t.Fatalf("%s: events = %d %s", phase.name, resp.StatusCode, body)
		case !phase.up && (resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, "clickhouse")):
			t.Fatalf("%s: events = %d %v %s, want a 503 problem naming clickhouse with Retry-After",
				phase.name, resp.StatusCode, resp.Header, body)
		}
		p.stop()
	}
}
