package webapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/storage"
)

// apiHandler is a handler that reports failure by returning an error: a *problem is
// written as is, anything else is logged and becomes a generic 500.
type apiHandler func(w http.ResponseWriter, r *http.Request) error

// handle adapts h to http.HandlerFunc.
func (s *Server) handle(h apiHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	}
}

// writeError renders err as a problem. Only problems reach the client verbatim; the
// details of any other error are logged and replaced, since they may name hosts,
// tables or queries.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if p, ok := errors.AsType[*httpapi.Problem](err); ok {
		httpapi.WriteProblem(w, p)
		return
	}
	if u, ok := errors.AsType[*storage.UnavailableError](err); ok {
		// A store is down: the route answers again once it is back, and /readyz
		// names it meanwhile.
		s.logger.WarnContext(r.Context(), "http request failed: a store is unreachable",
			"method", r.Method, "route", routePattern(r), "store", u.Store, "err", err)
		w.Header().Set("Retry-After", retryAfterSeconds)
		httpapi.WriteProblem(w, unavailable("%s is unreachable; try again later (GET /readyz shows when it is back)", u.Store))
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The client went away; nobody reads the answer and it is not our failure.
		s.logger.DebugContext(r.Context(), "http request cancelled by client",
			"method", r.Method, "route", routePattern(r), "err", err)
		return
	}
	s.logger.ErrorContext(r.Context(), "http request failed",
		"method", r.Method, "route", routePattern(r), "err", err)
	httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusInternalServerError, httpapi.ProblemInternal,
		"the server failed to handle the request; the error is logged"))
}

// routeNotFound answers requests no route matches.
func routeNotFound(_ http.ResponseWriter, r *http.Request) error {
	return httpapi.NotFound("no route for %s %s", r.Method, r.URL.Path)
}

// methodsToProbe are the methods the 405 answer's Allow header may list.
var methodsToProbe = [...]string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
}

// methodNotAllowed answers a known path asked with the wrong method, listing the
// methods it does have in Allow. chi does not hand a custom 405 handler the allowed
// methods, so they are found by asking the router.
func (s *Server) methodNotAllowed(router *chi.Mux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.RawPath
		if path == "" {
			path = r.URL.Path
		}
		var allowed []string
		for _, m := range methodsToProbe {
			if router.Match(chi.NewRouteContext(), m, path) {
				allowed = append(allowed, m)
			}
		}
		for _, m := range allowed {
			w.Header().Add("Allow", m)
		}
		httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusMethodNotAllowed, httpapi.ProblemMethodNotAllowed,
			"%s is not allowed on %s", r.Method, r.URL.Path))
	}
}

// routePattern returns the chi pattern of the route that served r ("/v1/sensors/{id}"),
// or "" when none matched.
func routePattern(r *http.Request) string {
	if rctx := chi.RouteContext(r.Context()); rctx != nil {
		return rctx.RoutePattern()
	}
	return ""
}
