package webapi_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lockstream/lockstream/webapi"
)

// A drained Health is not ready, whatever its stores say, and still live; one
// with a store down names it. The stores here are stand-ins: a real one cannot
// be made to fail on demand (degrade_test covers a real ClickHouse going away).
func TestHealthDrain(t *testing.T) {
	t.Parallel()
	up := webapi.PingerFunc(func(context.Context) error { return nil })
	down := webapi.PingerFunc(func(context.Context) error { return errors.New("dial tcp 10.0.0.9:5432: refused") })
	get := func(h http.HandlerFunc) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		return rec
	}

	h := webapi.NewHealth(map[string]webapi.Pinger{"postgres": up, "redis": up}, 0, nil)
	if rec := get(h.Readyz); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"redis":"ok"`) {
		t.Fatalf("readyz of a healthy process = %d %s", rec.Code, rec.Body)
	}
	h.Drain()
	h.Drain() // twice is once
	if rec := get(h.Readyz); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "shutting down") ||
		rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("readyz while draining = %d %s %s", rec.Code, rec.Header(), rec.Body)
	}
	if rec := get(h.Healthz); rec.Code != http.StatusOK {
		t.Fatalf("healthz while draining = %d %s", rec.Code, rec.Body)
	}

	h = webapi.NewHealth(map[string]webapi.Pinger{"postgres": down, "redis": up}, 0, nil)
	rec := get(h.Readyz)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"postgres":"down"`) ||
		strings.Contains(rec.Body.String(), "10.0.0.9") {
		t.Fatalf("readyz with postgres down = %d %s", rec.Code, rec.Body)
	}
}
