package webapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/lockstream/lockstream/storage"
)

// Problem types, the "type" member of every error body. They are URNs rather than
// links: stable names a client can switch on, described in openapi.yaml.
const (
	problemMalformedBody    = "urn:lockstream:problem:malformed-body"
	problemInvalidParameter = "urn:lockstream:problem:invalid-parameter"
	problemValidation       = "urn:lockstream:problem:validation"
	problemUnauthorized     = "urn:lockstream:problem:unauthorized"
	problemNotFound         = "urn:lockstream:problem:not-found"
	problemMethodNotAllowed = "urn:lockstream:problem:method-not-allowed"
	problemConflict         = "urn:lockstream:problem:conflict"
	problemBodyTooLarge     = "urn:lockstream:problem:body-too-large"
	problemInternal         = "urn:lockstream:problem:internal"
	problemNotReady         = "urn:lockstream:problem:not-ready"
)

// problemContentType is the media type of RFC 9457 error bodies.
const problemContentType = "application/problem+json"

// problem is an RFC 9457 problem detail. Handlers return it as an error; handle
// writes it.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Errors names every invalid field of a 422.
	Errors []fieldError `json:"errors,omitempty"`
	// Checks reports each store's state in a 503 from /readyz.
	Checks map[string]string `json:"checks,omitempty"`
}

// fieldError is one invalid field of a request, named by its JSON path
// ("push_targets[1].platform").
type fieldError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

func (p *problem) Error() string {
	return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail)
}

func newProblem(status int, typ, format string, args ...any) *problem {
	return &problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: fmt.Sprintf(format, args...)}
}

func malformedBody(format string, args ...any) *problem {
	return newProblem(http.StatusBadRequest, problemMalformedBody, format, args...)
}

func invalidParameter(format string, args ...any) *problem {
	return newProblem(http.StatusBadRequest, problemInvalidParameter, format, args...)
}

func notFound(format string, args ...any) *problem {
	return newProblem(http.StatusNotFound, problemNotFound, format, args...)
}

func conflict(format string, args ...any) *problem {
	return newProblem(http.StatusConflict, problemConflict, format, args...)
}

// fieldErrors collects every invalid field of a request so that one 422 names them
// all.
type fieldErrors []fieldError

func (e *fieldErrors) add(field, format string, args ...any) {
	*e = append(*e, fieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
}

// err returns the 422 problem naming every collected field, or nil when there is
// none.
func (e fieldErrors) err() error {
	if len(e) == 0 {
		return nil
	}
	names := make([]string, len(e))
	for i, fe := range e {
		names[i] = fe.Field
	}
	p := newProblem(http.StatusUnprocessableEntity, problemValidation, "invalid %s: %s",
		plural(len(e), "field", "fields"), strings.Join(names, ", "))
	p.Errors = e
	return p
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

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
	if p, ok := errors.AsType[*problem](err); ok {
		writeProblem(w, p)
		return
	}
	if u, ok := errors.AsType[*storage.UnavailableError](err); ok {
		// A store is down: the route answers again once it is back, and /readyz
		// names it meanwhile.
		s.logger.WarnContext(r.Context(), "http request failed: a store is unreachable",
			"method", r.Method, "route", routePattern(r), "store", u.Store, "err", err)
		w.Header().Set("Retry-After", retryAfterSeconds)
		writeProblem(w, unavailable("%s is unreachable; try again later (GET /readyz shows when it is back)", u.Store))
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
	writeProblem(w, newProblem(http.StatusInternalServerError, problemInternal,
		"the server failed to handle the request; the error is logged"))
}

// writeProblem writes p with its status and media type.
func writeProblem(w http.ResponseWriter, p *problem) {
	body, err := json.Marshal(p)
	if err != nil {
		// A problem holds strings and ints only; this cannot fail.
		panic(fmt.Sprintf("encoding problem: %v", err))
	}
	w.Header().Set("Content-Type", problemContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// routeNotFound answers requests no route matches.
func routeNotFound(_ http.ResponseWriter, r *http.Request) error {
	return notFound("no route for %s %s", r.Method, r.URL.Path)
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
		writeProblem(w, newProblem(http.StatusMethodNotAllowed, problemMethodNotAllowed,
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
