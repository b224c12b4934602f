package webapi

import (
	"net/http"

	"github.com/lockstream/lockstream/internal/httpapi"
)

// WithConsole serves the operator console (package console) under /console. The
// console signs its users in itself (a session cookie, not a bearer token), so its
// routes sit outside the token groups. Without it they answer 404.
func WithConsole(console http.Handler) Option {
	return func(s *Server) { s.console = console }
}

// serveConsole hands a /console request to the console.
func (s *Server) serveConsole(w http.ResponseWriter, r *http.Request) {
	if s.console == nil {
		httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusNotFound, httpapi.ProblemNotFound, "the operator console is not enabled on this server"))
		return
	}
	s.console.ServeHTTP(w, r)
}
