package webapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
)

// decodeJSON reads r's body, at most s.cfg.MaxBodyBytes of it, into dst: exactly one
// JSON value whose fields dst knows. Its errors are problems: 413 for too large a
// body, 400 naming the offending field or offset for anything else.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	if r.ContentLength > s.cfg.MaxBodyBytes {
		// Said up front: refuse before reading, whatever the body holds.
		return s.decodeProblem(&http.MaxBytesError{Limit: s.cfg.MaxBodyBytes})
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return s.decodeProblem(err)
	}
	// Anything after the value is a client bug (two objects, a stray brace) that
	// would otherwise be silently ignored.
	switch err := dec.Decode(&json.RawMessage{}); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return s.decodeProblem(err)
	default:
		return malformedBody("the body must hold a single JSON value")
	}
}

// decodeProblem turns a json.Decoder error into a problem that names the cause.
func (s *Server) decodeProblem(err error) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return newProblem(http.StatusRequestEntityTooLarge, problemBodyTooLarge,
			"the body is larger than %d bytes", s.cfg.MaxBodyBytes)
	}
	if syntaxErr, ok := errors.AsType[*json.SyntaxError](err); ok {
		return malformedBody("malformed JSON at byte %d: %s", syntaxErr.Offset, strings.TrimPrefix(syntaxErr.Error(), "json: "))
	}
	if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if typeErr.Field == "" {
			return malformedBody("the body must be %s, not %s", jsonTypeName(typeErr.Type), typeErr.Value)
		}
		return malformedBody("field %q must be %s, not %s", typeErr.Field, jsonTypeName(typeErr.Type), typeErr.Value)
	}
	switch {
	case errors.Is(err, io.EOF):
		return malformedBody("the body is empty; a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return malformedBody("malformed JSON: the body ends in the middle of a value")
	}
	// encoding/json reports unknown fields as a plain error: `json: unknown field "x"`.
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return malformedBody("unknown field %s", field)
	}
	return malformedBody("malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonTypeName names, for an error message, the JSON type a Go type decodes from.
func jsonTypeName(t reflect.Type) string {
	if t == nil {
		return "a JSON value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	default:
		return "a JSON value"
	}
}

// writeJSON writes v as the application/json body of a status response. It encodes
// before writing the header, so an encoding failure can still become a 500.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		return fmt.Errorf("encoding response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // A failed write means the client left; nothing to do.
	return nil
}

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
			return page{}, invalidParameter("limit must be an integer from 1 to %d, got %q", maxLimit, raw)
		}
		p.limit = n
	}
	if raw := q.Get("cursor"); raw != "" {
		key, err := base64.RawURLEncoding.DecodeString(raw)
		if err != nil || !valid(string(key)) {
			return page{}, invalidParameter("cursor %q is not a cursor this listing returned", raw)
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
