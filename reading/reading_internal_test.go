package reading

import (
	"testing"
)

// usualReadings are shapes parseFast takes.
var usualReadings = []string{
	`{"sensor_id":"xa7v9Dfadr7H","data":1,"ts":"2026-11-22T10:00:00Z"}`,
	`{"sensor_id":"a","data":0}`,
	` { "data" : 1 , "sensor_id" : "0123456789aBcDeF" , "ts" : null } `,
	`{"sensor_id":"a","data":1,"ts":1795341600123}`,
	`{"sensor_id":"a","data":1,"ts":0}`,
	`{"sensor_id":"a","data":1,"ts":"2026-11-22T11:00:00.5+01:00"}`,
}

// nearMisses are readings parseFast must leave to parseGeneral, valid or not.
var nearMisses = []string{
	`{"sensor_id":"a","data":1,"ts":01}`,
	`{"sensor_id":"a","data":1,"ts":-1}`,
	`{"sensor_id":"a","data":1,"ts":1.5}`,
	`{"sensor_id":"a","data":1,"ts":99999999999999999999}`,
	`{"sensor_id":"a","data":1,"ts":"2200-01-01T00:00:00Z"}`,
	`{"sensor_id":"a","data":1,"ts":"noon"}`,
	`{"sensor_id":"a","data":10}`,
	`{"sensor_id":"a","data":1.0}`,
	`{"sensor_id":"a","data":1e0}`,
	`{"sensor_id":"a","data":-0}`,
	`{"sensor_id":"a","data":true}`,
	`{"sensor_id":"a","data":0,"data":1}`,
	`{"sensor_id":"a","sensor_id":"b","data":1}`,
	`{"sensor_id":"a\u0062","data":1}`,
	`{"sensor_\u0069d":"a","data":1}`,
	`{"sensor_id":"0123456789abcdefX","data":1}`,
	`{"sensor_id":"ab-c","data":1}`,
	`{"sensor_id":"","data":1}`,
	`{"sensor_id":"a","data":1,"battery":3}`,
	`{"sensor_id":"a","data":1} x`,
	`{"sensor_id":"a","data":1}}`,
	`{"sensor_id":"a","data":1,}`,
	`{"sensor_id":"a" "data":1}`,
	`{"sensor_id":"a","data":1`,
	`{"sensor_id":"a","data"`,
	`{}`,
	`[]`,
	``,
	"{\"sensor_id\":\"a\",\"data\":1,\"ts\":\"2026-11-22T10:00:00Z\t\"}",
}

// FuzzParseFast checks that parseFast accepts nothing parseGeneral would judge
// differently: whatever it accepts, parseGeneral accepts with the same result.
func FuzzParseFast(f *testing.F) {
	for _, seed := range append(usualReadings, nearMisses...) {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		fast, ok := parseFast(value)
		if !ok {
			return
		}
		general, err := parseGeneral(nil, value)
		if err != nil {
			t.Fatalf("parseFast accepted %q as %+v; parseGeneral rejects it: %v", value, fast, err)
		}
		if string(fast.id) != general.SensorID || fast.data != general.Data || fast.ts != general.TS {
			t.Fatalf("parseFast read %q as %s/%d/%v, parseGeneral as %+v", value, fast.id, fast.data, fast.ts, general)
		}
	})
}

// TestParseFastTakesTheUsualShapes checks that the shortcut is taken where it
// should be: were it never taken, FuzzParseFast would pass and change nothing.
func TestParseFastTakesTheUsualShapes(t *testing.T) {
	t.Parallel()
	for _, value := range usualReadings {
		if _, ok := parseFast([]byte(value)); !ok {
			t.Errorf("parseFast(%q) declined a usual reading", value)
		}
	}
	for _, value := range nearMisses {
		if r, ok := parseFast([]byte(value)); ok {
			t.Errorf("parseFast(%q) = %+v, want it left to parseGeneral", value, r)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	value := []byte(`{"sensor_id":"xa7v9Dfadr7H","data":1}`)
	key := []byte("xa7v9Dfadr7H")
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := parseFast(value); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("general", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parseGeneral(key, value); err != nil {
				b.Fatal(err)
			}
		}
	})
}
