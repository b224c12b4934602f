package webapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's own Prometheus collectors.
type metrics struct {
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockstream_http_request_duration_seconds",
			Help:    "Time to serve an HTTP request, by chi route pattern, method and status code.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method", "code"}),
	}
	if err := reg.Register(m.duration); err != nil {
		return nil, fmt.Errorf("registering http metrics: %w", err)
	}
	return m, nil
}

// unmatchedRoute labels requests no route matched (404, 405), so that scanners
// probing random paths cannot blow up the metric's cardinality.
const unmatchedRoute = "unmatched"

// knownMethods bounds the method label for the same reason.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// instrument times every request by route pattern, never by raw path: /v1/sensors/a
// and /v1/sensors/b are one series.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		elapsed := time.Since(start)

		route := routePattern(r)
		if route == "" {
			route = unmatchedRoute
		}
		method := r.Method
		if !knownMethods[method] {
			method = "OTHER"
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		s.metrics.duration.WithLabelValues(route, method, strconv.Itoa(status)).Observe(elapsed.Seconds())
		s.logger.LogAttrs(r.Context(), slog.LevelDebug, "http request",
			slog.String("method", r.Method), slog.String("route", route), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.Duration("elapsed", elapsed))
	})
}

// recoverPanics turns a handler's panic into a logged 500 problem instead of a
// dropped connection. http.ErrAbortHandler is re-panicked: it is how a handler asks
// net/http to abort the response.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.logger.ErrorContext(r.Context(), "http handler panicked",
				"method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			writeProblem(w, newProblem(http.StatusInternalServerError, problemInternal,
				"the server failed to handle the request; the error is logged"))
		}()
		next.ServeHTTP(w, r)
	})
}

// requireAdmin lets through only requests bearing the admin token. Both tokens are
// hashed before the constant-time comparison so that neither their content nor their
// length leaks through timing.
func (s *Server) requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="lockstream"`)
			writeProblem(w, newProblem(http.StatusUnauthorized, problemUnauthorized,
				"this route needs an Authorization: Bearer <admin token> header"))
			return
		}
		got := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="lockstream", error="invalid_token"`)
			writeProblem(w, newProblem(http.StatusUnauthorized, problemUnauthorized, "the bearer token is not valid"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerToken returns the token of an "Authorization: Bearer <token>" header; the
// scheme is case-insensitive (RFC 9110, section 11.1).
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
