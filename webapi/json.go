package webapi

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/lockstream/lockstream/internal/httpapi"
)

// optional is a PATCH field: it tells a field left out (set false) from one given as
// null (null true) and from one given a value.
type optional[T any] struct {
	set   bool
	null  bool
	value T
}

// UnmarshalJSON records that the field was present. encoding/json calls it for a
// present field only, null included.
func (o *optional[T]) UnmarshalJSON(b []byte) error {
	o.set = true
	if string(b) == "null" {
		o.null = true
		return nil
	}
	return json.Unmarshal(b, &o.value)
}

// Paging limits. A limit above maxLimit is refused with 400 rather than clamped, so
// a client never silently gets fewer items per page than it asked for.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

// page is a parsed ?limit=&cursor= pair.
type page struct {
	after string
	limit int
}

// parsePage reads limit and cursor from r's query. A cursor is the base64url of the
// last key of the previous page; valid reports whether a decoded key can be a key of
// this listing at all, so that garbage is a 400 and not an empty page.
func parsePage(r *http.Request, valid func(key string) bool) (page, error) {
	q := r.URL.Query()
	p := page{limit: defaultLimit}
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > maxLimit {
			return page{}, httpapi.InvalidParameter("limit must be an integer from 1 to %d, got %q", maxLimit, raw)
		}
		p.limit = n
	}
	if raw := q.Get("cursor"); raw != "" {
		key, err := base64.RawURLEncoding.DecodeString(raw)
		if err != nil || !valid(string(key)) {
			return page{}, httpapi.InvalidParameter("cursor %q is not a cursor this listing returned", raw)
		}
		p.after = string(key)
	}
	return p, nil
}

// pageBody is the body of every list response.
type pageBody[T any] struct {
	Items []T `json:"items"`
	// NextCursor fetches the following page; it is absent on the last one.
	NextCursor string `json:"next_cursor,omitempty"`
}

// newPageBody renders rows, fetched with limit+1 so that one extra row tells whether
// a next page exists.
func newPageBody[R, T any](rows []R, limit int, key func(R) string, render func(R) T) pageBody[T] {
	body := pageBody[T]{Items: make([]T, 0, min(len(rows), limit))}
	if len(rows) > limit {
		rows = rows[:limit]
		body.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(key(rows[len(rows)-1])))
	}
	for _, row := range rows {
		body.Items = append(body.Items, render(row))
	}
	return body
}

// decodeJSON reads r's body into dst under the server's body limit
// (httpapi.DecodeJSON).
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	return httpapi.DecodeJSON(w, r, s.cfg.MaxBodyBytes, dst)
}

// decodeProblem turns a json.Decoder error into a problem under the server's
// body limit (httpapi.DecodeProblem).
func (s *Server) decodeProblem(err error) error {
	return httpapi.DecodeProblem(err, s.cfg.MaxBodyBytes)
}
