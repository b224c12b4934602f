package webapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/reading"
)

// MaxIngestReadings is the most readings one POST /v1/readings may carry.
const MaxIngestReadings = 10_000

// maxReadingErrors bounds the field errors one 422 lists, so that a batch of
// 10,000 bad readings does not answer with a megabyte of errors; the detail still
// counts them all.
const maxReadingErrors = 100

// problemUnavailable is the type of a 503 from a route whose backend (the Kafka
// producer, the history store) is not configured or failed.
const problemUnavailable = "urn:lockstream:problem:unavailable"

// retryAfterSeconds is the Retry-After of a 503 from a failed produce: long enough
// for a broker to elect a new leader.
const retryAfterSeconds = "5"

// ReadingPublisher produces readings to the readings topic. PublishReadings
// produces values[i] keyed by keys[i] (keys and values have the same length) and
// returns nil only once the broker acknowledged every one; an error may leave some
// of them written. stream.ReadingPublisher implements it over franz-go.
type ReadingPublisher interface {
	PublishReadings(ctx context.Context, keys, values [][]byte) error
}

// unavailable is a 503 problem.
func unavailable(format string, args ...any) *httpapi.Problem {
	return httpapi.NewProblem(http.StatusServiceUnavailable, problemUnavailable, format, args...)
}

// ingestReadings handles POST /v1/readings: one reading object, or an array of up
// to MaxIngestReadings of them. Every reading is validated exactly as the consumer
// validates a Kafka record (reading.Parse); one invalid reading rejects
// the whole request with a 422 naming each bad one, so that a request is either
// produced entirely or not at all. The answer is 202 only once the broker
// acknowledged every record.
func (s *Server) ingestReadings(w http.ResponseWriter, r *http.Request) error {
	if s.publisher == nil {
		return unavailable("ingest is disabled: the server has no Kafka producer")
	}
	elems, single, err := s.readReadings(w, r)
	if err != nil {
		return err
	}
	keys := make([][]byte, len(elems))
	values := make([][]byte, len(elems))
	var (
		errs []httpapi.FieldError
		bad  int
	)
	for i, elem := range elems {
		parsed, err := reading.Parse(nil, elem)
		if err != nil {
			bad++
			if len(errs) < maxReadingErrors {
				errs = append(errs, readingError(i, single, err))
			}
			continue
		}
		keys[i] = []byte(parsed.SensorID)
		// The record carries the reading as sent, minus the whitespace of a
		// pretty-printed body; the consumer parses it again.
		var compact bytes.Buffer
		compact.Grow(len(elem))
		if err := json.Compact(&compact, elem); err != nil {
			return fmt.Errorf("compacting reading %d: %w", i, err)
		}
		values[i] = compact.Bytes()
	}
	if bad > 0 {
		return invalidReadings(errs, bad, len(elems), single)
	}

	if len(elems) > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.PublishTimeout)
		defer cancel()
		if err := s.publisher.PublishReadings(ctx, keys, values); err != nil {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return err // the client left; writeError does not log it as a failure
			}
			s.logger.ErrorContext(r.Context(), "producing ingested readings", "readings", len(elems), "err", err)
			w.Header().Set("Retry-After", retryAfterSeconds)
			return unavailable("the broker did not acknowledge the %d readings; some may have been written, "+
				"and sending them again is safe", len(elems))
		}
	}
	return httpapi.WriteJSON(w, http.StatusAccepted, ingestBody{Accepted: len(elems)})
}

// ingestBody is the answer to an accepted POST /v1/readings.
type ingestBody struct {
	Accepted int `json:"accepted"`
}

// readReadings reads the body, at most cfg.MaxIngestBodyBytes of it, and splits it
// into the raw JSON of each reading. single reports a body that is one object
// rather than an array. A body that is not JSON at all is a 400: no element can be
// named in it.
func (s *Server) readReadings(w http.ResponseWriter, r *http.Request) (elems []json.RawMessage, single bool, err error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxIngestBodyBytes))
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return nil, false, httpapi.NewProblem(http.StatusRequestEntityTooLarge, httpapi.ProblemBodyTooLarge,
			"the body is larger than %d bytes", s.cfg.MaxIngestBodyBytes)
	}
	if err != nil {
		return nil, false, httpapi.MalformedBody("reading the body: %v", err)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, false, httpapi.MalformedBody("the body is empty; a reading object or an array of readings is required")
	}
	// Unmarshalling into a RawMessage checks the syntax of the whole body,
	// trailing garbage included, and reports the offset of the first error.
	var raw json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil {
		return nil, false, s.decodeProblem(err)
	}
	switch trimmed[0] {
	case '{':
		return []json.RawMessage{raw}, true, nil
	case '[':
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, false, fmt.Errorf("splitting a valid JSON array: %w", err)
		}
		if len(elems) > MaxIngestReadings {
			return nil, false, httpapi.NewProblem(http.StatusRequestEntityTooLarge, httpapi.ProblemBodyTooLarge,
				"the body holds %d readings; at most %d are accepted per request", len(elems), MaxIngestReadings)
		}
		return elems, false, nil
	default:
		return nil, false, httpapi.MalformedBody("the body must be a reading object or an array of readings")
	}
}

// readingError names the invalid reading i by its JSON path: "[3].data" for a bad
// field of the fourth element of an array, "[3]" when the reading as a whole is
// bad (not an object, an unknown or repeated field, too large). In a single-reading
// body the path has no index: "data", or "" for the reading as a whole. The detail
// starts with consumer's stable reason code ("bad_data: …").
func readingError(i int, single bool, err error) httpapi.FieldError {
	reject, ok := errors.AsType[*reading.RejectError](err)
	if !ok {
		// ParseReading promises a *RejectError; keep the error text if that changes.
		reject = &reading.RejectError{Reason: reading.ReasonNotJSON, Detail: err.Error()}
	}
	path := ""
	if !single {
		path = "[" + strconv.Itoa(i) + "]"
	}
	var member string
	switch reject.Reason {
	case reading.ReasonBadSensorID, reading.ReasonKeyMismatch:
		member = "sensor_id"
	case reading.ReasonBadData:
		member = "data"
	case reading.ReasonBadTS:
		member = "ts"
	}
	switch {
	case member == "":
	case path == "":
		path = member
	default:
		path += "." + member
	}
	return httpapi.FieldError{Field: path, Detail: reject.Reason + ": " + reject.Detail}
}

// invalidReadings is the 422 of a request with bad readings in it; errs lists at
// most maxReadingErrors of the bad ones.
func invalidReadings(errs []httpapi.FieldError, bad, total int, single bool) error {
	var p *httpapi.Problem
	if single {
		p = httpapi.NewProblem(http.StatusUnprocessableEntity, httpapi.ProblemValidation, "the reading is invalid: %s", errs[0].Detail)
	} else {
		names := make([]string, len(errs))
		for i, e := range errs {
			names[i] = e.Field
		}
		more := ""
		if bad > len(errs) {
			more = fmt.Sprintf(" (the first %d listed)", len(errs))
		}
		p = httpapi.NewProblem(http.StatusUnprocessableEntity, httpapi.ProblemValidation,
			"%d of %d readings are invalid%s: %s; nothing was published", bad, total, more, strings.Join(names, ", "))
	}
	p.Errors = errs
	return p
}
