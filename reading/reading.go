// Package reading is the format of a sensor reading: parsing, validation and the
// reasons a reading is rejected with. It is neutral: the state consumer, the
// history writer and the ingest API all judge readings with it, so a reading the
// API accepts is one the consumer applies.
package reading

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Reading is one valid sensor reading.
type Reading struct {
	SensorID string
	// Data is the lock state: exactly 0 or 1.
	Data int
	// TS is the device's own time, zero when the reading carried none. lockstream
	// measures with server receive time; TS is kept for history only.
	TS time.Time
}

// MaxBytes is the largest reading accepted, in bytes.
const MaxBytes = 64 << 10

// MaxSensorIDLen is the longest sensor id accepted.
const MaxSensorIDLen = 16

// The reasons a reading is rejected with. They are stable: they label metrics, go
// into the DLQ's "error" header and into the ingest API's problem responses.
const (
	ReasonTooLarge     = "too_large"
	ReasonNotJSON      = "not_json"
	ReasonUnknownField = "unknown_field"
	ReasonDuplicate    = "duplicate_field"
	ReasonBadSensorID  = "bad_sensor_id"
	ReasonKeyMismatch  = "key_mismatch"
	ReasonBadData      = "bad_data"
	ReasonBadTS        = "bad_ts"
)

// Reasons returns every reason Parse (and the consumer) can reject with, so
// metrics can be initialised for all of them.
func Reasons() []string {
	return []string{ReasonTooLarge, ReasonNotJSON, ReasonUnknownField, ReasonDuplicate,
		ReasonBadSensorID, ReasonKeyMismatch, ReasonBadData, ReasonBadTS}
}

// RejectError says why a reading was rejected: a stable Reason code and a Detail
// for people.
type RejectError struct {
	Reason string
	Detail string
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("reading rejected (%s): %s", e.Reason, e.Detail)
}

func reject(reason, format string, args ...any) error {
	return &RejectError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// The range of device times accepted: what ClickHouse's DateTime can hold.
var (
	minTS = time.Unix(0, 0).UTC()
	maxTS = time.Date(2106, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Parse validates and decodes one reading of DESIGN.md's format:
//
//	{"sensor_id":"xa7v9Dfadr7H","data":1,"ts":"2026-11-22T10:00:00Z"}
//
// sensor_id and data are required; ts is optional (RFC 3339 or integer unix
// milliseconds; null means absent). data must be the JSON number 0 or 1 as written:
// 1.0, "1" and true are rejected. Unknown and repeated fields are rejected, and
// field names match exactly (encoding/json would accept "Sensor_ID"). When key is
// not nil it must equal the sensor id (a Kafka record's key); nil means there is no
// key to compare, as for the ingest API.
//
// Every error is a *RejectError.
func Parse(key, value []byte) (Reading, error) {
	if f, ok := parseFast(value); ok {
		if key != nil && !bytes.Equal(key, f.id) {
			return Reading{}, reject(ReasonKeyMismatch, "key %s is not sensor_id %s",
				strconv.Quote(truncate(string(key), 40)), f.id)
		}
		return Reading{SensorID: string(f.id), Data: f.data, TS: f.ts}, nil
	}
	return parseGeneral(key, value)
}

// Raw is a reading as ParseKeyed returns it: ID may point into the parsed value,
// so a reading of the usual shape costs no allocation.
type Raw struct {
	ID   []byte
	Data int
	TS   time.Time
}

// ParseKeyed validates a record of the readings topic, whose key must be its
// sensor id (a missing key is a key_mismatch): readings of one sensor spread
// over partitions would lose their order. Every error is a *RejectError.
func ParseKeyed(key, value []byte) (Raw, error) {
	if f, ok := parseFast(value); ok && bytes.Equal(key, f.id) {
		return Raw{ID: f.id, Data: f.data, TS: f.ts}, nil
	}
	r, err := Parse(nil, value)
	if err != nil {
		return Raw{}, err
	}
	if len(key) == 0 {
		return Raw{}, reject(ReasonKeyMismatch, "record has no key; want sensor_id %s", r.SensorID)
	}
	if string(key) != r.SensorID {
		return Raw{}, reject(ReasonKeyMismatch, "key %s is not sensor_id %s",
			strconv.Quote(truncate(string(key), 40)), r.SensorID)
	}
	return Raw{ID: []byte(r.SensorID), Data: r.Data, TS: r.TS}, nil
}

// Headers of a DLQ record: the reason code, the detail for people and the
// record's source as topic/partition/offset.
const (
	HeaderError  = "error"
	HeaderDetail = "detail"
	HeaderSource = "source"
)

// parseGeneral is Parse for any input: it checks the syntax with
// encoding/json first, then the content.
func parseGeneral(key, value []byte) (Reading, error) {
	if len(value) > MaxBytes {
		return Reading{}, reject(ReasonTooLarge, "%d bytes, at most %d", len(value), MaxBytes)
	}
	// Validating first lets the scanner below assume well-formed JSON, so every
	// later error is about content, not syntax.
	if !json.Valid(value) {
		return Reading{}, reject(ReasonNotJSON, "not valid JSON")
	}
	s := scanner{b: value}
	s.skipSpace()
	if !s.consume('{') {
		return Reading{}, reject(ReasonNotJSON, "not a JSON object")
	}
	var (
		r                     Reading
		seenID, seenData, sTS bool
	)
	s.skipSpace()
	if !s.consume('}') {
		for {
			s.skipSpace()
			name, err := s.str()
			if err != nil {
				return Reading{}, reject(ReasonNotJSON, "field name: %v", err)
			}
			s.skipSpace()
			s.consume(':')
			s.skipSpace()
			switch name {
			case "sensor_id":
				if seenID {
					return Reading{}, reject(ReasonDuplicate, "sensor_id given twice")
				}
				seenID = true
				if r.SensorID, err = s.sensorID(); err != nil {
					return Reading{}, err
				}
			case "data":
				if seenData {
					return Reading{}, reject(ReasonDuplicate, "data given twice")
				}
				seenData = true
				if r.Data, err = s.data(); err != nil {
					return Reading{}, err
				}
			case "ts":
				if sTS {
					return Reading{}, reject(ReasonDuplicate, "ts given twice")
				}
				sTS = true
				if r.TS, err = s.ts(); err != nil {
					return Reading{}, err
				}
			default:
				return Reading{}, reject(ReasonUnknownField, "unknown field %s", strconv.Quote(truncate(name, 40)))
			}
			s.skipSpace()
			if s.consume('}') {
				break
			}
			s.consume(',')
		}
	}
	switch {
	case !seenID:
		return Reading{}, reject(ReasonBadSensorID, "sensor_id is missing")
	case !seenData:
		return Reading{}, reject(ReasonBadData, "data is missing")
	case key != nil && !bytes.Equal(key, []byte(r.SensorID)):
		return Reading{}, reject(ReasonKeyMismatch, "key %s is not sensor_id %s",
			strconv.Quote(truncate(string(key), 40)), r.SensorID)
	}
	return r, nil
}

// fastReading is a reading parseFast accepted. id points into the parsed bytes.
type fastReading struct {
	id   []byte
	data int
	ts   time.Time
}

// parseFast decodes a reading of the usual shape in one pass, without
// allocating: an object of sensor_id, data and optionally ts, each at most once,
// in any order, with strings that hold no escapes and ts as null, whole
// milliseconds or an RFC 3339 string. For anything else it reports false and
// parseGeneral judges the input; what parseFast accepts, parseGeneral accepts with
// the same result (FuzzParseFast checks this), so the shortcut changes speed only.
func parseFast(b []byte) (fastReading, bool) {
	var (
		r                        fastReading
		seenID, seenData, seenTS bool
	)
	if len(b) > MaxBytes {
		return r, false
	}
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return r, false
	}
	i++
	for {
		name, j, ok := plainString(b, skipSpace(b, i))
		if !ok {
			return r, false
		}
		i = skipSpace(b, j)
		if i == len(b) || b[i] != ':' {
			return r, false
		}
		i = skipSpace(b, i+1)
		if i == len(b) {
			return r, false
		}
		switch string(name) {
		case "sensor_id":
			id, j, ok := plainString(b, i)
			if seenID || !ok || !validSensorID(id) {
				return r, false
			}
			seenID, r.id, i = true, id, j
		case "data":
			if seenData || (b[i] != '0' && b[i] != '1') {
				return r, false
			}
			// The number must end here ("10", "1.0" and "1e0" do not): the check
			// for a comma or brace below sees to it.
			seenData, r.data, i = true, int(b[i]-'0'), i+1
		case "ts":
			ts, j, ok := fastTS(b, i)
			if seenTS || !ok {
				return r, false
			}
			seenTS, r.ts, i = true, ts, j
		default:
			return r, false
		}
		i = skipSpace(b, i)
		if i == len(b) {
			return r, false
		}
		if b[i] == '}' {
			break
		}
		if b[i] != ',' {
			return r, false
		}
		i++
	}
	if skipSpace(b, i+1) != len(b) || !seenID || !seenData {
		return r, false
	}
	return r, true
}

// fastTS decodes the ts value at b[i:] for parseFast: null, whole milliseconds
// without sign or leading zero, or an RFC 3339 string, within minTS and maxTS.
func fastTS(b []byte, i int) (time.Time, int, bool) {
	switch c := b[i]; {
	case c == 'n':
		if !bytes.HasPrefix(b[i:], []byte("null")) {
			return time.Time{}, 0, false
		}
		return time.Time{}, i + len("null"), true
	case c == '"':
		text, j, ok := plainString(b, i)
		if !ok {
			return time.Time{}, 0, false
		}
		t, err := time.Parse(time.RFC3339Nano, string(text))
		if err != nil {
			return time.Time{}, 0, false
		}
		t = t.UTC()
		return t, j, !t.Before(minTS) && t.Before(maxTS)
	case c >= '0' && c <= '9':
		if c == '0' {
			// A leading zero is the whole number; "01" is not JSON.
			return minTS, i + 1, true
		}
		var ms int64
		j := i
		for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
			if j-i == 15 { // past 2105 anyway; keeps ms from overflowing
				return time.Time{}, 0, false
			}
			ms = ms*10 + int64(b[j]-'0')
		}
		t := time.UnixMilli(ms).UTC()
		return t, j, t.Before(maxTS)
	}
	return time.Time{}, 0, false
}

// plainString returns the contents of the string at b[i:] and the index after
// it, if it is a string without escapes or control characters.
func plainString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func validSensorID(id []byte) bool {
	if len(id) < 1 || len(id) > MaxSensorIDLen {
		return false
	}
	for _, c := range id {
		if !isAlnum(c) {
			return false
		}
	}
	return true
}

// ValidSensorID reports whether id is 1 to 16 ASCII letters or digits.
func ValidSensorID(id string) bool {
	if len(id) < 1 || len(id) > MaxSensorIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !isAlnum(id[i]) {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// scanner walks a document json.Valid accepted, so it checks content, not syntax.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) skipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) consume(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// rawString returns the string token at the cursor, quotes included, and moves
// past it.
func (s *scanner) rawString() []byte {
	start := s.i
	s.i++ // opening quote
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
		case '"':
			s.i++
			return s.b[start:s.i]
		default:
			s.i++
		}
	}
	return s.b[start:s.i]
}

// str decodes the string token at the cursor.
func (s *scanner) str() (string, error) {
	if s.peek() != '"' {
		return "", fmt.Errorf("want a string")
	}
	raw := s.rawString()
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var out string
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", err
	}
	return out, nil
}

// number returns the number token at the cursor and moves past it.
func (s *scanner) number() []byte {
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			s.i++
		default:
			return s.b[start:s.i]
		}
	}
	return s.b[start:s.i]
}

// kind names the JSON type of the value at the cursor, for error details.
func (s *scanner) kind() string {
	switch c := s.peek(); {
	case c == '"':
		return "a string"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	default:
		return "a number"
	}
}

func (s *scanner) sensorID() (string, error) {
	if s.peek() != '"' {
		return "", reject(ReasonBadSensorID, "sensor_id is %s, want a string", s.kind())
	}
	id, err := s.str()
	if err != nil {
		return "", reject(ReasonNotJSON, "sensor_id: %v", err)
	}
	if !ValidSensorID(id) {
		return "", reject(ReasonBadSensorID, "sensor_id %s is not 1 to %d ASCII letters or digits",
			strconv.Quote(truncate(id, 40)), MaxSensorIDLen)
	}
	return id, nil
}

func (s *scanner) data() (int, error) {
	c := s.peek()
	if c != '-' && (c < '0' || c > '9') {
		return 0, reject(ReasonBadData, "data is %s, want the number 0 or 1", s.kind())
	}
	n := s.number()
	switch string(n) {
	case "0":
		return 0, nil
	case "1":
		return 1, nil
	}
	return 0, reject(ReasonBadData, "data is %s, want exactly 0 or 1", truncate(string(n), 40))
}

func (s *scanner) ts() (time.Time, error) {
	var t time.Time
	switch c := s.peek(); {
	case c == 'n':
		s.i += len("null")
		return time.Time{}, nil
	case c == '"':
		text, err := s.str()
		if err != nil {
			return time.Time{}, reject(ReasonNotJSON, "ts: %v", err)
		}
		t, err = time.Parse(time.RFC3339Nano, text)
		if err != nil {
			return time.Time{}, reject(ReasonBadTS, "ts %s is not RFC 3339", strconv.Quote(truncate(text, 40)))
		}
	case c == '-' || c >= '0' && c <= '9':
		n := s.number()
		ms, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return time.Time{}, reject(ReasonBadTS, "ts %s is not whole unix milliseconds", truncate(string(n), 40))
		}
		t = time.UnixMilli(ms)
	default:
		return time.Time{}, reject(ReasonBadTS, "ts is %s, want an RFC 3339 string or unix milliseconds", s.kind())
	}
	t = t.UTC()
	if t.Before(minTS) || !t.Before(maxTS) {
		return time.Time{}, reject(ReasonBadTS, "ts %s is outside 1970 to 2105", t.Format(time.RFC3339))
	}
	return t, nil
}
