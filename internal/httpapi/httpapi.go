// Package httpapi is the plumbing of lockstream's JSON HTTP APIs: RFC 9457
// problem bodies, strict JSON decoding whose errors name the offending field,
// and JSON answers. The API packages (webapi and the compatibility APIs it
// mounts) share it; it holds no state and no routes.
package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
)

// Problem types, the "type" member of every error body. They are URNs rather than
// links: stable names a client can switch on, described in openapi.yaml.
const (
	ProblemMalformedBody    = "urn:lockstream:problem:malformed-body"
	ProblemInvalidParameter = "urn:lockstream:problem:invalid-parameter"
	ProblemValidation       = "urn:lockstream:problem:validation"
	ProblemUnauthorized     = "urn:lockstream:problem:unauthorized"
	ProblemNotFound         = "urn:lockstream:problem:not-found"
	ProblemMethodNotAllowed = "urn:lockstream:problem:method-not-allowed"
	ProblemConflict         = "urn:lockstream:problem:conflict"
	ProblemBodyTooLarge     = "urn:lockstream:problem:body-too-large"
	ProblemInternal         = "urn:lockstream:problem:internal"
	ProblemNotReady         = "urn:lockstream:problem:not-ready"
)

// ProblemContentType is the media type of RFC 9457 error bodies.
const ProblemContentType = "application/problem+json"

// Problem is an RFC 9457 problem detail. Handlers return it as an error; the
// API's handler adapter writes it with WriteProblem.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Errors names every invalid field of a 422.
	Errors []FieldError `json:"errors,omitempty"`
	// Checks reports each store's state in a 503 from /readyz.
	Checks map[string]string `json:"checks,omitempty"`
}

// FieldError is one invalid field of a request, named by its JSON path
// ("push_targets[1].platform").
type FieldError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

// Error summarises the problem for logs.
func (p *Problem) Error() string {
	return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail)
}

// NewProblem is a problem of status and type with a formatted detail.
func NewProblem(status int, typ, format string, args ...any) *Problem {
	return &Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: fmt.Sprintf(format, args...)}
}

// MalformedBody is a 400: the body is not the JSON the route reads.
func MalformedBody(format string, args ...any) *Problem {
	return NewProblem(http.StatusBadRequest, ProblemMalformedBody, format, args...)
}

// InvalidParameter is a 400: a path or query parameter is invalid.
func InvalidParameter(format string, args ...any) *Problem {
	return NewProblem(http.StatusBadRequest, ProblemInvalidParameter, format, args...)
}

// NotFound is a 404.
func NotFound(format string, args ...any) *Problem {
	return NewProblem(http.StatusNotFound, ProblemNotFound, format, args...)
}

// Conflict is a 409.
func Conflict(format string, args ...any) *Problem {
	return NewProblem(http.StatusConflict, ProblemConflict, format, args...)
}

// FieldErrors collects every invalid field of a request so that one 422 names them
// all.
type FieldErrors []FieldError

// Add records field as invalid, with why.
func (e *FieldErrors) Add(field, format string, args ...any) {
	*e = append(*e, FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
}

// Err returns the 422 problem naming every collected field, or nil when there is
// none.
func (e FieldErrors) Err() error {
	if len(e) == 0 {
		return nil
	}
	names := make([]string, len(e))
	for i, fe := range e {
		names[i] = fe.Field
	}
	p := NewProblem(http.StatusUnprocessableEntity, ProblemValidation, "invalid %s: %s",
		Plural(len(e), "field", "fields"), strings.Join(names, ", "))
	p.Errors = e
	return p
}

// Plural is one or many as n asks.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// WriteProblem writes p with its status and media type.
func WriteProblem(w http.ResponseWriter, p *Problem) {
	body, err := json.Marshal(p)
	if err != nil {
		// A problem holds strings and ints only; this cannot fail.
		panic(fmt.Sprintf("encoding problem: %v", err))
	}
	w.Header().Set("Content-Type", ProblemContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// DecodeJSON reads r's body, at most limit bytes of it, into dst: exactly one
// JSON value whose fields dst knows. Its errors are problems: 413 for too large a
// body, 400 naming the offending field or offset for anything else.
func DecodeJSON(w http.ResponseWriter, r *http.Request, limit int64, dst any) error {
	if r.ContentLength > limit {
		// Said up front: refuse before reading, whatever the body holds.
		return DecodeProblem(&http.MaxBytesError{Limit: limit}, limit)
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return DecodeProblem(err, limit)
	}
	// Anything after the value is a client bug (two objects, a stray brace) that
	// would otherwise be silently ignored.
	switch err := dec.Decode(&json.RawMessage{}); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return DecodeProblem(err, limit)
	default:
		return MalformedBody("the body must hold a single JSON value")
	}
}

// DecodeProblem turns a json.Decoder error into a problem that names the cause;
// limit is the body limit a *http.MaxBytesError exceeded.
func DecodeProblem(err error, limit int64) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return NewProblem(http.StatusRequestEntityTooLarge, ProblemBodyTooLarge,
			"the body is larger than %d bytes", limit)
	}
	if syntaxErr, ok := errors.AsType[*json.SyntaxError](err); ok {
		return MalformedBody("malformed JSON at byte %d: %s", syntaxErr.Offset, strings.TrimPrefix(syntaxErr.Error(), "json: "))
	}
	if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if typeErr.Field == "" {
			return MalformedBody("the body must be %s, not %s", jsonTypeName(typeErr.Type), typeErr.Value)
		}
		return MalformedBody("field %q must be %s, not %s", typeErr.Field, jsonTypeName(typeErr.Type), typeErr.Value)
	}
	switch {
	case errors.Is(err, io.EOF):
		return MalformedBody("the body is empty; a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return MalformedBody("malformed JSON: the body ends in the middle of a value")
	}
	// encoding/json reports unknown fields as a plain error: `json: unknown field "x"`.
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return MalformedBody("unknown field %s", field)
	}
	return MalformedBody("malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
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

// WriteJSON writes v as the application/json body of a status response. It encodes
// before writing the header, so an encoding failure can still become a 500.
func WriteJSON(w http.ResponseWriter, status int, v any) error {
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
