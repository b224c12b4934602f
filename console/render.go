package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/storage"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// contentSecurityPolicy allows the console's own scripts, styles and images and
// nothing else: no inline script, no other origin, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// pages holds the parsed templates, one set per page, and the static assets with
// their content hashes (so their URLs change when they do).
type pages struct {
	byName  map[string]*template.Template
	static  fs.FS
	version map[string]string
}

func loadPages() (*pages, error) {
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, fmt.Errorf("console: static assets: %w", err)
	}
	p := &pages{byName: map[string]*template.Template{}, static: static, version: map[string]string{}}
	err = fs.WalkDir(static, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(static, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		p.version[name] = hex.EncodeToString(sum[:6])
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console: static assets: %w", err)
	}
	funcs := template.FuncMap{
		"asset": func(name string) (string, error) {
			v, ok := p.version[name]
			if !ok {
				return "", fmt.Errorf("no asset %q", name)
			}
			return "/console/static/" + name + "?v=" + v, nil
		},
		"when":      formatTime,
		"ago":       ago,
		"span":      span,
		"state":     stateName,
		"lockState": func(data int) string { return stateName(&data) },
		"pathEsc":   url.PathEscape,
		"queryEsc":  url.QueryEscape,
		"lower":     strings.ToLower,
		"failing":   func(e storage.EndpointHealth) int { return e.Failing() },
		"stateOf":   func(m map[storage.DeliveryState]int, s string) int { return m[storage.DeliveryState(s)] },
		"incidentRows": func(state string, list []domain.Incident, member bool, csrf string) incidentRows {
			return incidentRows{State: state, List: list, Member: member, CSRF: csrf}
		},
		"incidentForm": func(inc domain.Incident, csrf string) incidentForm { return incidentForm{Incident: inc, CSRF: csrf} },
		"deliveryStates": func() []string {
			return []string{"SCHEDULED", "PENDING", "IN_FLIGHT", "RETRY", "PAUSED", "SENT", "FAILED", "GIVEN_UP", "SUPERSEDED"}
		},
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	for _, name := range names {
		base := path.Base(name)
		if base == "layout.html" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", name)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", base, err)
		}
		p.byName[strings.TrimSuffix(base, ".html")] = t
	}
	return p, nil
}

// view is what every page template gets: the layout's needs and the page's data.
type view struct {
	Title  string
	Active string
	// Session is nil on the sign-in page.
	Session *session
	Flash   string
	Data    any
}

// securityHeaders go on every console response.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// render writes page with status, or a 500 when the template fails (rendered into a
// buffer first, so a failure never leaves half a page).
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, v view) {
	t, ok := c.pages.byName[page]
	var buf bytes.Buffer
	if !ok {
		c.logger.ErrorContext(r.Context(), "console: no such page", "page", page)
		status = http.StatusInternalServerError
		buf.WriteString("internal error")
	} else if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		c.logger.ErrorContext(r.Context(), "console: rendering a page", "page", page, "err", err)
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString("internal error")
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// httpError is an error a page answers with its own status and message.
type httpError struct {
	status  int
	message string
}

func (e *httpError) Error() string { return e.message }

func errorf(status int, format string, args ...any) error {
	return &httpError{status: status, message: fmt.Sprintf(format, args...)}
}

// fail renders err as an error page: its own status for an httpError, 404 for
// storage.ErrNotFound, else a logged 500 that shows nothing of the cause.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	status, message := http.StatusInternalServerError, "Something went wrong; the error is logged."
	var he *httpError
	switch {
	case errors.As(err, &he):
		status, message = he.status, he.message
	case errors.Is(err, storage.ErrNotFound):
		status, message = http.StatusNotFound, "Not found."
	default:
		c.logger.ErrorContext(r.Context(), "console: page failed", "path", r.URL.Path, "err", err)
	}
	c.render(w, r, status, "error", view{Title: http.StatusText(status), Session: s, Data: message})
}

// serveStatic serves an embedded asset. Its URL carries its content hash, so it may
// be cached for long.
func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	b, err := fs.ReadFile(c.pages.static, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	switch path.Ext(name) {
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case ".svg":
		w.Header().Set("Content-Type", "image/svg+xml")
	}
	if r.URL.Query().Get("v") == c.pages.version[name] {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	_, _ = w.Write(b)
}

// formatTime shows an instant in UTC to the second; the zero time as "never".
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// ago says how long before now t was, coarsely ("3 h 12 min ago").
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t)
	if d < 0 {
		return "in the future"
	}
	return span(d) + " ago"
}

// span says a duration as people read it: seconds, minutes, hours and
// minutes, or days.
func span(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// stateName names a sensor's data: 1 is locked (closed), 0 unlocked (open).
func stateName(data *int) string {
	switch {
	case data == nil:
		return "—"
	case *data == 1:
		return "locked"
	case *data == 0:
		return "unlocked"
	}
	return fmt.Sprint(*data)
}
