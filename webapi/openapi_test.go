package webapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.yaml.in/yaml/v3"

	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// newRouteOnlyServer builds a server whose routes can be walked and whose handlers
// that touch no store can run; the registry is never called.
func newRouteOnlyServer(t *testing.T, logger *slog.Logger) *Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := New(Config{AdminToken: "t"}, registry.New(&storage.Postgres{}), nil, reg, reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type openAPIDoc struct {
	OpenAPI    string                    `yaml:"openapi"`
	Paths      map[string]map[string]any `yaml:"paths"`
	Components map[string]map[string]any `yaml:"components"`
}

// TestOpenAPICoversEveryRoute walks the router and fails when a route or method is
// missing from openapi.yaml (or documented but not routed), when an operation lacks
// the error responses its handler can produce, or when a $ref dangles.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	s := newRouteOnlyServer(t, slog.New(slog.DiscardHandler))

	// The document served is the embedded one, and it parses.
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/openapi.yaml", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/yaml" || !bytes.Equal(rec.Body.Bytes(), openAPIDocument) {
		t.Fatalf("GET /openapi.yaml = %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var doc openAPIDoc
	if err := yaml.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("parsing openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	var raw any
	if err := yaml.Unmarshal(openAPIDocument, &raw); err != nil {
		t.Fatal(err)
	}

	routed := map[string]bool{}
	err := chi.Walk(s.routes(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		key := strings.ToLower(method) + " " + route
		routed[key] = true
		op, ok := doc.Paths[route][strings.ToLower(method)].(map[string]any)
		if !ok {
			t.Errorf("%s %s is routed but not in openapi.yaml", method, route)
			return nil
		}
		checkOperation(t, method, route, op, raw)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(routed) < 19 {
		t.Fatalf("walked only %d routes: %v", len(routed), routed)
	}
	for path, item := range doc.Paths {
		for method := range item {
			if method == "parameters" || method == "summary" || method == "description" {
				continue
			}
			if !routed[method+" "+path] {
				t.Errorf("openapi.yaml documents %s %s, which is not routed", strings.ToUpper(method), path)
			}
		}
	}
	checkRefs(t, raw, raw, "")
}

// checkOperation requires of op a success response, the errors its handler can
// produce, and problem+json for each error response.
func checkOperation(t *testing.T, method, route string, op map[string]any, root any) {
	t.Helper()
	name := method + " " + route
	responses, _ := op["responses"].(map[string]any)
	if len(responses) == 0 {
		t.Errorf("%s: no responses", name)
		return
	}
	codes := map[string]bool{}
	for code, resp := range responses {
		codes[code] = true
		if code < "400" {
			continue
		}
		resolved := resolve(root, resp)
		content, _ := resolved["content"].(map[string]any)
		// The console's pages answer people, so its errors are HTML pages.
		_, html := content["text/html"]
		console := strings.HasPrefix(route, "/console")
		if _, ok := content["application/problem+json"]; !ok && route != "/metrics" && !(console && html) {
			t.Errorf("%s: response %s is not application/problem+json", name, code)
		}
	}
	// A console form or the console's root answers with a redirect (303, 301).
	success := func(c string) bool {
		return strings.HasPrefix(c, "2") || strings.HasPrefix(route, "/console") && strings.HasPrefix(c, "3")
	}
	if !slices.ContainsFunc(slices.Collect(maps.Keys(codes)), success) {
		t.Errorf("%s: no 2xx response", name)
	}
	var want []string
	if strings.HasPrefix(route, "/v1/") {
		want = append(want, "401", "500")
	}
	if strings.Contains(route, "{") {
		want = append(want, "404")
	}
	if _, ok := op["requestBody"]; ok {
		want = append(want, "400", "413", "422")
	}
	if params, _ := op["parameters"].([]any); slices.ContainsFunc(params, func(p any) bool {
		return fmt.Sprint(resolve(root, p)["name"]) == "limit"
	}) {
		want = append(want, "400")
	}
	if method == "POST" && route == "/v1/sensors" {
		want = append(want, "409")
	}
	for _, code := range want {
		if !codes[code] {
			t.Errorf("%s: response %s is not documented", name, code)
		}
	}
}

// resolve follows a local $ref.
func resolve(root, node any) map[string]any {
	m, _ := node.(map[string]any)
	if ref, ok := m["$ref"].(string); ok {
		target, err := lookup(root, ref)
		if err != nil {
			return nil
		}
		m, _ = target.(map[string]any)
	}
	return m
}

func lookup(root any, ref string) (any, error) {
	pointer, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("%s is not a local reference", ref)
	}
	node := root
	for part := range strings.SplitSeq(pointer, "/") {
		m, ok := node.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: %s is not inside an object", ref, part)
		}
		if node, ok = m[part]; !ok {
			return nil, fmt.Errorf("%s: no %s", ref, part)
		}
	}
	return node, nil
}

// checkRefs fails on every $ref that does not resolve.
func checkRefs(t *testing.T, root, node any, at string) {
	t.Helper()
	switch n := node.(type) {
	case map[string]any:
		for k, v := range n {
			if k == "$ref" {
				if _, err := lookup(root, fmt.Sprint(v)); err != nil {
					t.Errorf("dangling $ref at %s: %v", at, err)
				}
				continue
			}
			checkRefs(t, root, v, at+"/"+k)
		}
	case []any:
		for i, v := range n {
			checkRefs(t, root, v, fmt.Sprintf("%s/%d", at, i))
		}
	}
}

func TestPanicBecomesLoggedProblem(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	s := newRouteOnlyServer(t, slog.New(slog.NewTextHandler(&logs, nil)))
	r := s.routes()
	r.Get("/boom", func(http.ResponseWriter, *http.Request) { panic("kaboom") })

	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest("GET", "/boom", nil))
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("Content-Type") != httpapi.ProblemContentType {
		t.Fatalf("panic answered %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var p httpapi.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != httpapi.ProblemInternal || strings.Contains(p.Detail, "kaboom") {
		t.Fatalf("problem = %+v", p)
	}
	if !strings.Contains(logs.String(), "kaboom") || !strings.Contains(logs.String(), "recovered a panic") ||
		!strings.Contains(logs.String(), "openapi_test.go") {
		t.Fatalf("panic not logged with its stack: %s", logs.String())
	}
	if got := testutil.ToFloat64(s.metrics.panics.WithLabelValues("handler")); got != 1 {
		t.Errorf("panics_total{where=handler} = %v, want 1", got)
	}
}
