package webapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/internal/contain"
	"github.com/lockstream/lockstream/internal/httpapi"
	lsmetrics "github.com/lockstream/lockstream/internal/metrics"
)

// metrics are the server's own Prometheus collectors.
type metrics struct {
	duration *prometheus.HistogramVec
	panics   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockstream_http_request_duration_seconds",
			Help:    "Time to serve an HTTP request, by chi route pattern, method and status code.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method", "code"}),
	}
	if err := lsmetrics.RegisterAll(reg, m.duration); err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	var err error
	if m.panics, err = contain.Counter(reg); err != nil {
		return nil, fmt.Errorf("http: %w", err)
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
// dropped connection, counted in lockstream_panics_total{where="handler"}.
// http.ErrAbortHandler is re-panicked: it is how a handler asks net/http to abort
// the response.
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
			p := contain.Recovered("handler", v)
			contain.Report(r.Context(), p, s.metrics.panics, s.logger, "method", r.Method, "path", r.URL.Path)
			httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusInternalServerError, httpapi.ProblemInternal,
				"the server failed to handle the request; the error is logged"))
		}()
		next.ServeHTTP(w, r)
	})
}

// bounded gives the handler's context the RequestTimeout deadline: a store that
// hangs makes the request fail as a 503 problem (storage reports the deadline as
// unavailable) before WriteTimeout would cut the connection.
func (s *Server) bounded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// streaming lifts the server's read and write deadlines for a route that answers
// for longer than WriteTimeout (server-sent events): use it in place of bounded.
// (net/http itself clears the read deadline once a request's body is read; lifting
// it here too keeps a streaming route that reads a long body safe.)
// Such a handler must end by itself when its context ends (client gone, shutdown).
func (s *Server) streaming(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := errors.Join(rc.SetReadDeadline(time.Time{}), rc.SetWriteDeadline(time.Time{})); err != nil {
			s.logger.WarnContext(r.Context(), "lifting the deadlines of a streaming route", "route", routePattern(r), "err", err)
		}
		next.ServeHTTP(w, r)
	})
}

// bearerAuth describes one of the API's bearer tokens: which routes it opens and
// the setting that configures it, for the answers of requireToken.
type bearerAuth struct {
	// name is what the token is called in answers: "admin", "ingest", "push".
	name string
	// setting is the environment variable that configures it.
	setting string
	// disabled is the detail of the 503 answered while no token is configured.
	disabled string
	// realm is the WWW-Authenticate realm of a 401.
	realm string
}

// requireToken lets through only requests bearing one of tokens (the empty ones
// are not configured and match nothing); any other token, the API's other tokens
// included, is a 401 problem. With no token configured the routes are disabled
// and answer 503 whatever the request carries. Both sides are hashed before the
// constant-time comparison so that neither a token's content nor its length
// leaks through timing.
func (s *Server) requireToken(auth bearerAuth, tokens ...string) func(http.Handler) http.Handler {
	var want [][sha256.Size]byte
	for _, t := range tokens {
		if t != "" {
			want = append(want, sha256.Sum256([]byte(t)))
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if len(want) == 0 {
				httpapi.WriteProblem(w, unavailable("%s (%s)", auth.disabled, auth.setting))
				return
			}
			got, ok := bearerToken(r)
			if !ok {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf("Bearer realm=%q", auth.realm))
				httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusUnauthorized, httpapi.ProblemUnauthorized,
					"this route needs an Authorization: Bearer <%s token> header", auth.name))
				return
			}
			gotHash := sha256.Sum256([]byte(got))
			match := 0
			for _, h := range want { // every one compared: the time says nothing of which matched
				match |= subtle.ConstantTimeCompare(gotHash[:], h[:])
			}
			if match != 1 {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf("Bearer realm=%q, error=\"invalid_token\"", auth.realm))
				httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusUnauthorized, httpapi.ProblemUnauthorized,
					"the bearer token is not the %s token", auth.name))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
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
