package bridge_test

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/bridge"
)

var topics = bridge.Topics{Readings: "r", DLQ: "d"}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func TestBody(t *testing.T) {
	for _, c := range []struct {
		name, body string
		readings   []string // key=value
		rejects    []string // reason
	}{
		{"one reading", `{"sensor_id":"a1","data":1}`, []string{`a1={"sensor_id":"a1","data":1}`}, nil},
		{"compacted", " {\"sensor_id\": \"a1\",\n \"data\": 0 }\n", []string{`a1={"sensor_id":"a1","data":0}`}, nil},
		{"array", `[{"sensor_id":"a1","data":1}, {"sensor_id":"a2","data":9}, 7]`,
			[]string{`a1={"sensor_id":"a1","data":1}`}, []string{"bad_data", "not_json"}},
		{"empty array", `[]`, nil, nil},
		{"broken array", `[{"sensor_id":"a1","data":1}`, nil, []string{"not_json"}},
		{"not json", `hello`, nil, []string{"not_json"}},
		{"empty", ``, nil, []string{"not_json"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := topics.Body([]byte(c.body), "amqp:k")
			var got, rejects []string
			for _, r := range p.Readings {
				if r.Topic != "r" {
					t.Errorf("reading to topic %q", r.Topic)
				}
				got = append(got, string(r.Key)+"="+string(r.Value))
			}
			for _, r := range p.Rejects {
				rejects = append(rejects, r.Reason)
				if r.Record.Topic != "d" || header(r.Record, bridge.HeaderError) != r.Reason || header(r.Record, bridge.HeaderSource) != "amqp:k" {
					t.Errorf("DLQ record %+v", r.Record)
				}
			}
			if strings.Join(got, " ") != strings.Join(c.readings, " ") || strings.Join(rejects, " ") != strings.Join(c.rejects, " ") {
				t.Errorf("readings %v rejects %v, want %v %v", got, rejects, c.readings, c.rejects)
			}
		})
	}
}

func TestSensorPayload(t *testing.T) {
	for _, c := range []struct {
		sensor, payload, want, reason string
	}{
		{"s1", "1", `{"sensor_id":"s1","data":1}`, ""},
		{"s1", " 0\n", `{"sensor_id":"s1","data":0}`, ""},
		{"s1", `{"sensor_id":"s1","data":1,"ts":5}`, `{"sensor_id":"s1","data":1,"ts":5}`, ""},
		{"s1", `{"sensor_id":"s2","data":1}`, "", "key_mismatch"},
		{"s1", "2", "", "bad_data"},
		{"s1", "true", "", "bad_data"},
		{"s1", `"1"`, "", "bad_data"},
		{"s1", "", "", "not_json"},
		{"s1", "on", "", "not_json"},
		{"", "1", "", "bad_sensor_id"},
		{"has-dash", "1", "", "bad_sensor_id"},
		{"s12345678901234567", "0", "", "bad_sensor_id"},
	} {
		p := topics.SensorPayload(c.sensor, []byte(c.payload), "mqtt:t/"+c.sensor)
		switch {
		case c.reason == "" && (len(p.Readings) != 1 || string(p.Readings[0].Value) != c.want || string(p.Readings[0].Key) != c.sensor):
			t.Errorf("%s %q: %+v, want the reading %s", c.sensor, c.payload, p, c.want)
		case c.reason != "" && (len(p.Rejects) != 1 || p.Rejects[0].Reason != c.reason):
			t.Errorf("%s %q: %+v, want a reject %s", c.sensor, c.payload, p, c.reason)
		}
	}
}

func TestDLQRecordCutsLargeValues(t *testing.T) {
	big := []byte(strings.Repeat("x", bridge.MaxDLQValueBytes+10))
	r := topics.DLQRecord(nil, big, "too_large", "d", "amqp:k")
	if len(r.Value) != bridge.MaxDLQValueBytes || header(r, bridge.HeaderOriginalSize) != "65546" {
		t.Errorf("value %d bytes, original-size %q", len(r.Value), header(r, bridge.HeaderOriginalSize))
	}
}
