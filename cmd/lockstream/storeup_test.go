package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockstream/lockstream/storage/storagetest"
)

// pingFunc is a store stand-in whose ping fails: the real stores cannot be made
// unreachable on demand here.
type pingFunc func(ctx context.Context) error

func (f pingFunc) Ping(ctx context.Context) error { return f(ctx) }

// The probe reports each store the process opened as up, and a store that does not
// answer as down, in lockstream_store_up; GET /readyz (the node's webapi.Health,
// whose store-down answers webapi's tests cover) pings the same stores.
func TestStoreProbe(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	c := parseAllSettings(t, "--pg-url="+stores.PostgresURL, "--clickhouse-url="+stores.ClickHouseURL,
		"--redis-url="+stores.RedisURL, "--redis-prefix="+stores.RedisPrefix)
	c.Node.need = usesPostgres | usesClickHouse
	n, err := openNode(context.Background(), &c.Node, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("opening the stores (make services starts them): %v", err)
	}
	t.Cleanup(n.close)

	want := `# HELP lockstream_store_up 1 when the store answered a ping at scrape time (within 2 s), 0 when not; one series per store the process uses.
# TYPE lockstream_store_up gauge
lockstream_store_up{store="clickhouse"} 1
lockstream_store_up{store="postgres"} 1
`
	if err := testutil.GatherAndCompare(n.reg, strings.NewReader(want), "lockstream_store_up"); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	n.health.Readyz(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"postgres":"ok"`) ||
		!strings.Contains(rec.Body.String(), `"clickhouse":"ok"`) {
		t.Fatalf("readyz = %d %s", rec.Code, rec.Body)
	}

	var pings atomic.Int32
	n.probe.stores["redis"] = pingFunc(func(context.Context) error {
		pings.Add(1)
		return errors.New("connection refused")
	})
	// A scrape right after another answers with its pings: redis is not
	// pinged, and not reported.
	n.probe.reuse = time.Hour
	if err := testutil.GatherAndCompare(n.reg, strings.NewReader(want), "lockstream_store_up"); err != nil {
		t.Fatal(err)
	}
	if got := pings.Load(); got != 0 {
		t.Fatalf("redis pinged %d times by a scrape within the reuse time, want 0", got)
	}
	n.probe.reuse = 0
	want = strings.Replace(want, "lockstream_store_up{store=\"postgres\"} 1\n",
		"lockstream_store_up{store=\"postgres\"} 1\nlockstream_store_up{store=\"redis\"} 0\n", 1)
	if err := testutil.GatherAndCompare(n.reg, strings.NewReader(want), "lockstream_store_up"); err != nil {
		t.Fatal(err)
	}
}
