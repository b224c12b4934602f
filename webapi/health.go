package webapi

import (
	"context"
	_ "embed"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// healthz answers as long as the process serves HTTP: liveness, not readiness.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// Readiness states of one check.
const (
	checkOK   = "ok"
	checkDown = "down"
)

// readyz pings every store at once, each with cfg.ReadyTimeout, and answers 503
// naming each store that is down. The errors themselves are logged, not shown: the
// route is unauthenticated and they name hosts.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		results = make(map[string]string, len(s.checks))
	)
	for name, check := range s.checks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadyTimeout)
			defer cancel()
			state := checkOK
			if err := check.Ping(ctx); err != nil {
				state = checkDown
				s.logger.WarnContext(r.Context(), "readiness check failed", "check", name, "err", err)
			}
			mu.Lock()
			results[name] = state
			mu.Unlock()
		})
	}
	wg.Wait()

	var down []string
	for _, name := range slices.Sorted(maps.Keys(results)) {
		if results[name] != checkOK {
			down = append(down, name)
		}
	}
	if len(down) > 0 {
		p := newProblem(http.StatusServiceUnavailable, problemNotReady, "not ready: %s down", strings.Join(down, ", "))
		p.Checks = results
		return p
	}
	return writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "checks": results})
}

//go:embed openapi.yaml
var openAPIDocument []byte

// serveOpenAPI serves the embedded OpenAPI 3.1 description of every route.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(openAPIDocument)
}
