package webapi

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockstream/lockstream/internal/httpapi"
)

// Health answers GET /healthz and GET /readyz. It is the one implementation of
// both probes: the API serves it, and so does the metrics address of a process
// without the API (cmd/lockstream), so that every process is judged the same way
// and every one stops being ready the same way when it shuts down (Drain).
type Health struct {
	checks  map[string]Pinger
	timeout time.Duration
	logger  *slog.Logger
	// draining is set once the process is stopping: /readyz answers 503 from then
	// on, whatever the stores say.
	draining atomic.Bool
}

// NewHealth returns the probes of a process whose readiness is that every one of
// checks (named, for instance "postgres", "redis", "clickhouse") answers its ping
// within timeout. timeout defaults to DefaultReadyTimeout; a nil logger logs
// nothing. A nil check is a programming error and panics.
func NewHealth(checks map[string]Pinger, timeout time.Duration, logger *slog.Logger) *Health {
	for name, check := range checks {
		if check == nil {
			panic("webapi: readiness check " + name + " is nil")
		}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Health{checks: maps.Clone(checks), timeout: cmp.Or(timeout, DefaultReadyTimeout), logger: logger}
}

// Drain makes GET /readyz answer 503 from now on: the process is stopping, and
// load balancers and Kubernetes should send new work elsewhere while it still
// serves what they send meanwhile (see LOCKSTREAM_SHUTDOWN_DELAY). It is not
// undone; calling it again does nothing.
func (h *Health) Drain() { h.draining.Store(true) }

// Draining reports whether Drain was called.
func (h *Health) Draining() bool { return h.draining.Load() }

// Healthz answers 200 as long as the process serves HTTP: liveness, not
// readiness. It still answers while the process drains.
func (h *Health) Healthz(w http.ResponseWriter, r *http.Request) {
	_ = h.healthz(w, r)
}

// Readyz answers 200 when every check answers, and a 503 problem naming each
// one down, or saying that the process is shutting down, else.
func (h *Health) Readyz(w http.ResponseWriter, r *http.Request) {
	if err := h.readyz(w, r); err != nil {
		if p, ok := errors.AsType[*httpapi.Problem](err); ok {
			httpapi.WriteProblem(w, p)
		}
	}
}

func (h *Health) healthz(w http.ResponseWriter, _ *http.Request) error {
	return httpapi.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// Readiness states of one check.
const (
	checkOK   = "ok"
	checkDown = "down"
)

// readyz pings every check at once, each within h.timeout, and returns a 503
// problem naming each one down. The errors themselves are logged, not shown: the
// route is unauthenticated and they name hosts. A draining process is not ready
// without asking the stores.
func (h *Health) readyz(w http.ResponseWriter, r *http.Request) error {
	if h.Draining() {
		return httpapi.NewProblem(http.StatusServiceUnavailable, httpapi.ProblemNotReady, "not ready: shutting down")
	}
	results := h.ping(r.Context())
	var down []string
	for _, name := range slices.Sorted(maps.Keys(results)) {
		if results[name] != checkOK {
			down = append(down, name)
		}
	}
	if len(down) > 0 {
		p := httpapi.NewProblem(http.StatusServiceUnavailable, httpapi.ProblemNotReady, "not ready: %s down", strings.Join(down, ", "))
		p.Checks = results
		return p
	}
	return httpapi.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "checks": results})
}

// ping pings every check at once and returns each one's state.
func (h *Health) ping(ctx context.Context) map[string]string {
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		results = make(map[string]string, len(h.checks))
	)
	for name, check := range h.checks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, h.timeout)
			defer cancel()
			state := checkOK
			if err := check.Ping(ctx); err != nil {
				state = checkDown
				h.logger.WarnContext(ctx, "readiness check failed", "check", name, "err", err)
			}
			mu.Lock()
			results[name] = state
			mu.Unlock()
		})
	}
	wg.Wait()
	return results
}

//go:embed openapi.yaml
var openAPIDocument []byte

// serveOpenAPI serves the embedded OpenAPI 3.1 description of every route.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(openAPIDocument)
}
