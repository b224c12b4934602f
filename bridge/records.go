package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/reading"
)

// Headers of a DLQ record, as the state consumer writes them.
const (
	HeaderError  = reading.HeaderError
	HeaderDetail = reading.HeaderDetail
	HeaderSource = reading.HeaderSource
	// HeaderOriginalSize is set when the DLQ record's value had to be cut to
	// MaxDLQValueBytes: the size of the message as received, in bytes.
	HeaderOriginalSize = "original-size"
)

// MaxBodyBytes is the largest message body a bridge reads readings from; a
// larger one is rejected whole as too_large. It fits an array of 10,000 readings,
// like POST /v1/readings.
const MaxBodyBytes = 4 << 20

// MaxDLQValueBytes is the most of a rejected message the DLQ keeps: a larger
// value is cut to it (with HeaderOriginalSize), so a DLQ record never exceeds
// the broker's record size limit.
const MaxDLQValueBytes = reading.MaxBytes

// ReasonTooLarge is the reason of a body over MaxBodyBytes: the reading reason.
const ReasonTooLarge = reading.ReasonTooLarge

// ReadingReasons returns every reason a reading can be rejected with, so that
// metrics can start at zero for each.
func ReadingReasons() []string { return reading.Reasons() }

// Topics names the topics a bridge produces to.
type Topics struct {
	// Readings is the readings topic (stream.Config.ReadingsTopic()).
	Readings string
	// DLQ is the dead-letter topic (stream.Config.DLQTopic()).
	DLQ string
}

// Rejected is one bad part of a message, with the DLQ record that keeps it.
type Rejected struct {
	Reason string
	Detail string
	Record *kgo.Record
}

// Parsed is what one message becomes: records for the readings topic, keyed by
// sensor id, and the DLQ records of its bad parts.
type Parsed struct {
	Readings []*kgo.Record
	Rejects  []Rejected
}

// Records returns every record of p, readings first.
func (p Parsed) Records() []*kgo.Record {
	out := make([]*kgo.Record, 0, len(p.Readings)+len(p.Rejects))
	out = append(out, p.Readings...)
	for _, r := range p.Rejects {
		out = append(out, r.Record)
	}
	return out
}

// Body parses a message body holding one reading object or an array of them
// (the AMQP bridge's events.sensor.update.reading). Each reading is validated
// as the state consumer validates a Kafka record; good ones become readings
// records (compacted JSON, keyed by sensor id), bad ones DLQ records with their
// reason, the DLQ detail naming an array element as "[i]". A body that is not
// JSON, or neither an object nor an array, or over MaxBodyBytes, is one reject.
func (t Topics) Body(body []byte, source string) Parsed {
	if len(body) > MaxBodyBytes {
		return t.reject(nil, body, reading.ReasonTooLarge,
			fmt.Sprintf("%d bytes, at most %d", len(body), MaxBodyBytes), source)
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '[' {
		var p Parsed
		t.add(&p, body, nil, "", source)
		return p
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(body, &elems); err != nil {
		return t.reject(nil, body, reading.ReasonNotJSON, "not a valid JSON array: "+err.Error(), source)
	}
	p := Parsed{Readings: make([]*kgo.Record, 0, len(elems))}
	for i, elem := range elems {
		t.add(&p, elem, nil, "["+strconv.Itoa(i)+"] ", source)
	}
	return p
}

// SensorPayload parses an MQTT payload for the sensor the topic names: a reading
// object (whose sensor_id must be sensorID: key_mismatch otherwise) or just 0 or
// 1, which becomes {"sensor_id":…,"data":…}. Any other bare JSON value (2,
// true, "1") is bad_data.
func (t Topics) SensorPayload(sensorID string, payload []byte, source string) Parsed {
	if bare := bytes.TrimSpace(payload); len(bare) == 1 && (bare[0] == '0' || bare[0] == '1') {
		if !reading.ValidSensorID(sensorID) {
			return t.reject([]byte(sensorID), payload, reading.ReasonBadSensorID,
				fmt.Sprintf("the topic's last level %s is not a sensor id (1 to %d letters or digits)",
					strconv.Quote(truncate(sensorID, 40)), reading.MaxSensorIDLen), source)
		}
		value := make([]byte, 0, len(sensorID)+26)
		value = append(value, `{"sensor_id":"`...)
		value = append(value, sensorID...)
		value = append(value, `","data":`...)
		value = append(value, bare[0], '}')
		return Parsed{Readings: []*kgo.Record{{Topic: t.Readings, Key: []byte(sensorID), Value: value}}}
	}
	if bare := bytes.TrimSpace(payload); len(bare) > 0 && bare[0] != '{' && json.Valid(bare) {
		return t.reject([]byte(sensorID), payload, reading.ReasonBadData,
			fmt.Sprintf("a bare payload is 0 or 1, got %s", truncate(string(bare), 40)), source)
	}
	var p Parsed
	t.add(&p, payload, []byte(sensorID), "", source)
	return p
}

// add validates one reading (against key when not nil) and adds its record to p.
func (t Topics) add(p *Parsed, value, key []byte, where, source string) {
	r, err := reading.Parse(key, value)
	if err != nil {
		reason, detail := reading.ReasonNotJSON, err.Error()
		if rej, ok := err.(*reading.RejectError); ok {
			reason, detail = rej.Reason, rej.Detail
		}
		p.Rejects = append(p.Rejects, t.rejected(key, value, reason, where+detail, source))
		return
	}
	compact := value
	if needsCompacting(value) {
		var b bytes.Buffer
		b.Grow(len(value))
		if err := json.Compact(&b, value); err == nil { // valid JSON: ParseReading checked
			compact = b.Bytes()
		}
	}
	p.Readings = append(p.Readings, &kgo.Record{Topic: t.Readings, Key: []byte(r.SensorID), Value: compact})
}

// needsCompacting reports whether value holds JSON whitespace (outside strings
// too, possibly: compacting is then merely unnecessary).
func needsCompacting(value []byte) bool {
	return bytes.ContainsAny(value, " \t\r\n")
}

func (t Topics) reject(key, value []byte, reason, detail, source string) Parsed {
	return Parsed{Rejects: []Rejected{t.rejected(key, value, reason, detail, source)}}
}

func (t Topics) rejected(key, value []byte, reason, detail, source string) Rejected {
	return Rejected{Reason: reason, Detail: detail, Record: t.DLQRecord(key, value, reason, detail, source)}
}

// DLQRecord returns the DLQ record keeping value, rejected for reason: the
// headers error, detail and source (the bridge and the routing key or topic, as
// "amqp:events.sensor.update.reading" or "mqtt:lockstream/readings/x1"). A value
// over MaxDLQValueBytes is cut to it and HeaderOriginalSize says how long it was.
func (t Topics) DLQRecord(key, value []byte, reason, detail, source string) *kgo.Record {
	rec := &kgo.Record{Topic: t.DLQ, Key: key, Value: value, Headers: []kgo.RecordHeader{
		{Key: HeaderError, Value: []byte(reason)},
		{Key: HeaderDetail, Value: []byte(truncate(detail, 1024))},
		{Key: HeaderSource, Value: []byte(source)},
	}}
	if len(value) > MaxDLQValueBytes {
		rec.Value = value[:MaxDLQValueBytes]
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderOriginalSize, Value: []byte(strconv.Itoa(len(value)))})
	}
	return rec
}

// truncate cuts s to at most n bytes, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
