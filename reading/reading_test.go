package reading_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/reading"
)

func TestParseReadingAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		key   []byte
		value string
		want  reading.Reading
	}{
		{"design example", []byte("xa7v9Dfadr7H"), `{"sensor_id":"xa7v9Dfadr7H","data":1,"ts":"2026-11-22T10:00:00Z"}`,
			reading.Reading{SensorID: "xa7v9Dfadr7H", Data: 1, TS: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}},
		{"no ts, no key", nil, `{"sensor_id":"0xA","data":0}`, reading.Reading{SensorID: "0xA", Data: 0}},
		{"null ts", nil, `{"data":0,"ts":null,"sensor_id":"TestSensor"}`, reading.Reading{SensorID: "TestSensor"}},
		{"unix millis", nil, `{"sensor_id":"0123456789aBcDeF","data":1,"ts":1795341600123}`,
			reading.Reading{SensorID: "0123456789aBcDeF", Data: 1, TS: time.UnixMilli(1795341600123).UTC()}},
		{"offset and fraction", nil, `{"sensor_id":"a","data":1,"ts":"2026-11-22T11:00:00.5+01:00"}`,
			reading.Reading{SensorID: "a", Data: 1, TS: time.Date(2026, 11, 22, 10, 0, 0, 5e8, time.UTC)}},
		{"whitespace and escapes", nil, " {\n \"sensor_\\u0069d\" : \"ab\\u0063\" ,\t\"data\" : 1 } ",
			reading.Reading{SensorID: "abc", Data: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := reading.Parse(tt.key, []byte(tt.value))
			if err != nil {
				t.Fatalf("ParseReading(%q) = %v", tt.value, err)
			}
			if got.SensorID != tt.want.SensorID || got.Data != tt.want.Data || !got.TS.Equal(tt.want.TS) {
				t.Fatalf("ParseReading(%q) = %+v, want %+v", tt.value, got, tt.want)
			}
		})
	}
}

func TestParseReadingRejects(t *testing.T) {
	t.Parallel()
	big := `{"sensor_id":"a","data":1,"ts":"` + strings.Repeat(" ", reading.MaxBytes) + `"}`
	tests := []struct {
		name   string
		key    []byte
		value  string
		reason string
	}{
		{"too large", nil, big, reading.ReasonTooLarge},
		{"broken", nil, `{"sensor_id":"a","data":1`, reading.ReasonNotJSON},
		{"empty", nil, ``, reading.ReasonNotJSON},
		{"array", nil, `[{"sensor_id":"a","data":1}]`, reading.ReasonNotJSON},
		{"string", nil, `"hello"`, reading.ReasonNotJSON},
		{"trailing garbage", nil, `{"sensor_id":"a","data":1} x`, reading.ReasonNotJSON},
		{"unknown field", nil, `{"sensor_id":"a","data":1,"battery":80}`, reading.ReasonUnknownField},
		{"case folded field", nil, `{"Sensor_ID":"a","data":1}`, reading.ReasonUnknownField},
		{"repeated data", nil, `{"sensor_id":"a","data":0,"data":1}`, reading.ReasonDuplicate},
		{"missing id", nil, `{"data":1}`, reading.ReasonBadSensorID},
		{"empty id", nil, `{"sensor_id":"","data":1}`, reading.ReasonBadSensorID},
		{"long id", nil, `{"sensor_id":"0123456789abcdefX","data":1}`, reading.ReasonBadSensorID},
		{"id with dash", nil, `{"sensor_id":"ab-c","data":1}`, reading.ReasonBadSensorID},
		{"non-ASCII id", nil, `{"sensor_id":"abé","data":1}`, reading.ReasonBadSensorID},
		{"numeric id", nil, `{"sensor_id":12,"data":1}`, reading.ReasonBadSensorID},
		{"key mismatch", []byte("b"), `{"sensor_id":"a","data":1}`, reading.ReasonKeyMismatch},
		{"empty key", []byte{}, `{"sensor_id":"a","data":1}`, reading.ReasonKeyMismatch},
		{"missing data", nil, `{"sensor_id":"a"}`, reading.ReasonBadData},
		{"data 2", nil, `{"sensor_id":"a","data":2}`, reading.ReasonBadData},
		{"data 1.0", nil, `{"sensor_id":"a","data":1.0}`, reading.ReasonBadData},
		{"data 1e0", nil, `{"sensor_id":"a","data":1e0}`, reading.ReasonBadData},
		{"data -0", nil, `{"sensor_id":"a","data":-0}`, reading.ReasonBadData},
		{"data string", nil, `{"sensor_id":"a","data":"1"}`, reading.ReasonBadData},
		{"data true", nil, `{"sensor_id":"a","data":true}`, reading.ReasonBadData},
		{"data null", nil, `{"sensor_id":"a","data":null}`, reading.ReasonBadData},
		{"ts not a date", nil, `{"sensor_id":"a","data":1,"ts":"yesterday"}`, reading.ReasonBadTS},
		{"ts fractional millis", nil, `{"sensor_id":"a","data":1,"ts":1.5}`, reading.ReasonBadTS},
		{"ts before 1970", nil, `{"sensor_id":"a","data":1,"ts":-1}`, reading.ReasonBadTS},
		{"ts after 2105", nil, `{"sensor_id":"a","data":1,"ts":"2200-01-01T00:00:00Z"}`, reading.ReasonBadTS},
		{"ts boolean", nil, `{"sensor_id":"a","data":1,"ts":false}`, reading.ReasonBadTS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := reading.Parse(tt.key, []byte(tt.value))
			var rej *reading.RejectError
			if !errors.As(err, &rej) {
				t.Fatalf("ParseReading(%.60q) = %v, want a *RejectError", tt.value, err)
			}
			if rej.Reason != tt.reason || rej.Detail == "" {
				t.Fatalf("ParseReading(%.60q): reason %q (%s), want %q", tt.value, rej.Reason, rej.Detail, tt.reason)
			}
		})
	}
}

// FuzzParseReading checks that ParseReading never panics, fails only with a known
// reason, and accepts only what a strict reading of the format allows.
func FuzzParseReading(f *testing.F) {
	for _, seed := range []string{
		`{"sensor_id":"xa7v9Dfadr7H","data":1,"ts":"2026-11-22T10:00:00Z"}`,
		`{"sensor_id":"a","data":0,"ts":1795341600123}`,
		`{"sensor_id":"a","data":1.0}`,
		`{"sensor_id":"a\u0062","data":1,"x":[1,{"y":2}]}`,
		`{"sensor_id":"a","data":0,"data":1}`,
		`{"sensor_id":"a","data":1`,
		`[]`,
		``,
	} {
		f.Add([]byte("a"), []byte(seed))
		f.Add([]byte(nil), []byte(seed))
	}
	known := map[string]bool{}
	for _, r := range reading.Reasons() {
		known[r] = true
	}
	f.Fuzz(func(t *testing.T, key, value []byte) {
		r, err := reading.Parse(key, value)
		if err != nil {
			var rej *reading.RejectError
			if !errors.As(err, &rej) || !known[rej.Reason] {
				t.Fatalf("error %v is not a RejectError with a known reason", err)
			}
			return
		}
		if !reading.ValidSensorID(r.SensorID) || (r.Data != 0 && r.Data != 1) {
			t.Fatalf("accepted %q as %+v", value, r)
		}
		if key != nil && string(key) != r.SensorID {
			t.Fatalf("accepted key %q for sensor %q", key, r.SensorID)
		}
		// Whatever is accepted is a JSON object that encoding/json reads the same way.
		var loose map[string]any
		if err := json.Unmarshal(value, &loose); err != nil {
			t.Fatalf("accepted %q that encoding/json rejects: %v", value, err)
		}
		if loose["sensor_id"] != r.SensorID || loose["data"] != float64(r.Data) {
			t.Fatalf("accepted %q as %+v, encoding/json reads %v", value, r, loose)
		}
	})
}
