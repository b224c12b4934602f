package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/internal/runtest"
	"github.com/lockstream/lockstream/reading"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

func startConsumer(t *testing.T, cfg consumer.Config, states consumer.StateStore, sightings consumer.Sightings) (*runtest.Running, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	deps := consumer.Deps{States: states, Sightings: sightings}
	if pg, ok := states.(*consumer.PostgresStore); ok {
		deps.Unregistered = pg
	}
	c, err := consumer.New(cfg, deps, reg, runtest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	return runtest.Start(t, c.Run), reg
}

// metric returns the sum of the named metric's series whose labels include want.
func metric(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// input is one record the tests produce, with what should become of it.
type input struct {
	key    []byte // nil: no key
	value  []byte
	reason string // "" for a valid reading
	sensor string
	data   int
}

// pattern builds n records over sensors s0…s(sensors-1): valid readings that
// repeat or flip, mixed with one bad record of each kind in every few.
func pattern(seed uint64, sensors, n int) []input {
	rng := rand.New(rand.NewPCG(seed, seed))
	last := map[string]int{}
	var out []input
	for i := range n {
		id := fmt.Sprintf("s%d", rng.IntN(sensors))
		if i%9 == 4 {
			out = append(out, badInput(i/9, id))
			continue
		}
		data, seen := last[id]
		switch {
		case !seen:
			data = rng.IntN(2)
		case rng.IntN(3) == 0: // flip a third of the time, else repeat
			data = 1 - data
		}
		last[id] = data
		value := fmt.Sprintf(`{"sensor_id":%q,"data":%d}`, id, data)
		if i%2 == 0 {
			value = fmt.Sprintf(`{"sensor_id":%q,"data":%d,"ts":%d}`, id, data, 1795341600000+int64(i))
		}
		out = append(out, input{key: []byte(id), value: []byte(value), sensor: id, data: data})
	}
	return out
}

func badInput(k int, id string) input {
	in := input{key: []byte(id)}
	switch k % 10 {
	case 0:
		in.value, in.reason = []byte(`{"sensor_id":"`+id+`","data":1`), reading.ReasonNotJSON
	case 1: // out of range
		in.value, in.reason = fmt.Appendf(nil, `{"sensor_id":%q,"data":%d}`, id, []int{2, -1, 10}[k/10%3]), reading.ReasonBadData
	case 2:
		in.value, in.reason = fmt.Appendf(nil, `{"sensor_id":%q,"data":"1"}`, id), reading.ReasonBadData
	case 3:
		long := id + "0123456789abcdef"
		in.key, in.value, in.reason = []byte(long), fmt.Appendf(nil, `{"sensor_id":%q,"data":1}`, long), reading.ReasonBadSensorID
	case 4:
		in.value, in.reason = []byte(`{"sensor_id":"other","data":1}`), reading.ReasonKeyMismatch
	case 5:
		in.value, in.reason = fmt.Appendf(nil, `{"sensor_id":%q,"data":1,"battery":3}`, id), reading.ReasonUnknownField
	case 6: // not a time, or out of range
		ts := []string{`"noon"`, `"2200-01-01T00:00:00Z"`, `-1`}[k/10%3]
		in.value, in.reason = fmt.Appendf(nil, `{"sensor_id":%q,"data":0,"ts":%s}`, id, ts), reading.ReasonBadTS
	case 7:
		in.key, in.value, in.reason = nil, fmt.Appendf(nil, `{"sensor_id":%q,"data":0}`, id), reading.ReasonKeyMismatch
	case 8:
		in.value, in.reason = fmt.Appendf(nil, `{"sensor_id":%q,"data":1.0}`, id), reading.ReasonBadData
	case 9:
		if k%20 == 9 && k < 400 { // a few, not many: each is 64 KiB
			pad := strings.Repeat(" ", reading.MaxBytes)
			in.value, in.reason = fmt.Appendf(nil, `{"sensor_id":%q,%s"data":1}`, id, pad), reading.ReasonTooLarge
		} else {
			in.value, in.reason = []byte(`not json at all`), reading.ReasonNotJSON
		}
	}
	return in
}

// produced is an input as the broker stored it.
type produced struct {
	input
	partition int32
	offset    int64
}

// produce sends inputs in order (per partition order is kept) and returns where
// each landed.
func produce(t *testing.T, client *kgo.Client, cfg stream.Config, inputs []input) []produced {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runtest.WaitTimeout)
	defer cancel()
	out := make([]produced, 0, len(inputs))
	for chunk := range slicesChunk(inputs, 2000) {
		recs := make([]*kgo.Record, len(chunk))
		for i, in := range chunk {
			recs[i] = &kgo.Record{Topic: cfg.ReadingsTopic(), Key: in.key, Value: in.value}
		}
		// ProduceSync fills in each record's partition and offset (its results
		// come in completion order, not input order).
		if err := client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("producing readings: %v", err)
		}
		for i, r := range recs {
			out = append(out, produced{input: chunk[i], partition: r.Partition, offset: r.Offset})
		}
	}
	return out
}

func slicesChunk(in []input, n int) func(func([]input) bool) {
	return func(yield func([]input) bool) {
		for len(in) > 0 {
			k := min(n, len(in))
			if !yield(in[:k]) {
				return
			}
			in = in[k:]
		}
	}
}

// expectation is what the consumer must make of a stream.
type expectation struct {
	final   map[string]consumer.StateChange // per sensor, the last change
	changes map[string][]event.Event        // per sensor, in order
	valid   []produced
	bad     map[[2]int64]produced // by partition, offset
	ids     []string              // every sensor id mentioned, valid or not
}

// expect derives the expected outcome; at gives each record's broker timestamp,
// topicID is the readings topic's id, and only registered sensors have a state
// (nil: every sensor is registered).
func expect(records []produced, at func(partition int32, offset int64) time.Time, topicID [16]byte,
	registered map[string]bool) expectation {
	e := expectation{final: map[string]consumer.StateChange{}, changes: map[string][]event.Event{},
		bad: map[[2]int64]produced{}}
	seenIDs := map[string]bool{}
	for _, r := range records {
		for _, id := range []string{r.sensor, string(r.key)} {
			if id != "" && !seenIDs[id] {
				seenIDs[id] = true
				e.ids = append(e.ids, id)
			}
		}
		if r.reason != "" {
			e.bad[[2]int64{int64(r.partition), r.offset}] = r
			continue
		}
		e.valid = append(e.valid, r)
		if registered != nil && !registered[r.sensor] {
			continue // history only
		}
		prev, known := e.final[r.sensor]
		if known && prev.Data == r.data {
			continue
		}
		data := r.data
		ev := event.Event{ID: event.StateChangedID(r.sensor, topicID, r.partition, r.offset), Type: event.StateChanged,
			SensorID: r.sensor, Data: &data, At: at(r.partition, r.offset)}
		if known {
			p := prev.Data
			ev.Previous = &p
		}
		e.changes[r.sensor] = append(e.changes[r.sensor], ev)
		e.final[r.sensor] = consumer.StateChange{SensorID: r.sensor, Data: r.data, ChangedAt: ev.At,
			TopicID: topicID, Partition: r.partition, Offset: r.offset}
	}
	return e
}

// timestamps reads the readings topic back for the broker's record timestamps.
func timestamps(t *testing.T, cfg stream.Config) func(int32, int64) time.Time {
	t.Helper()
	ts := map[[2]int64]time.Time{}
	for _, r := range streamtest.ReadAll(t, cfg, cfg.ReadingsTopic()) {
		ts[[2]int64{int64(r.Partition), r.Offset}] = r.Timestamp
	}
	return func(p int32, o int64) time.Time { return ts[[2]int64{int64(p), o}] }
}

// stateMatches reports whether sensor_state holds exactly the expected states.
func stateMatches(ctx context.Context, pg *consumer.PostgresStore, want expectation) (bool, string) {
	got, err := pg.LookupSensors(ctx, want.ids)
	if err != nil {
		return false, err.Error()
	}
	for i, id := range want.ids {
		w, ok := want.final[id]
		s := got[i].State
		switch {
		case !ok && s != nil:
			return false, fmt.Sprintf("sensor %s has state %+v, want none", id, s)
		case !ok:
		case s == nil:
			return false, fmt.Sprintf("sensor %s has no state, want %+v", id, w)
		case s.Data != w.Data || s.TopicID != w.TopicID || s.Partition != w.Partition || s.Offset != w.Offset ||
			!s.ChangedAt.Equal(w.ChangedAt.Truncate(time.Microsecond)):
			return false, fmt.Sprintf("sensor %s state %+v, want %+v", id, *s, w)
		}
	}
	return true, ""
}

// decodeEvents reads the events topic, grouped by sensor in topic order.
func decodeEvents(t *testing.T, cfg stream.Config) (map[string][]event.Event, int) {
	t.Helper()
	bySensor := map[string][]event.Event{}
	records := streamtest.ReadAll(t, cfg, cfg.EventsTopic())
	kept := 0
	for _, r := range records {
		e, err := event.Decode(r.Value)
		if err != nil {
			t.Fatalf("events topic holds %q: %v", r.Value, err)
		}
		if string(r.Key) != e.SensorID {
			t.Fatalf("event %s keyed %q, want its sensor %s", e.ID, r.Key, e.SensorID)
		}
		if e.Type == event.SensorUnstable || e.Type == event.SensorStable {
			// The flapping judgement of fast patterns (TestJudgeFlapping
			// checks it); these tests check the changes themselves.
			continue
		}
		bySensor[e.SensorID] = append(bySensor[e.SensorID], e)
		kept++
	}
	return bySensor, kept
}

// withoutFlapping leaves out the flapping judgement's events (see
// decodeEvents).
func withoutFlapping(events []storage.HistoryEvent) []storage.HistoryEvent {
	return slices.DeleteFunc(events, func(e storage.HistoryEvent) bool {
		return e.Type == string(event.SensorUnstable) || e.Type == string(event.SensorStable)
	})
}

func sameEvent(a, b event.Event) bool {
	return a.ID == b.ID && a.Type == b.Type && a.SensorID == b.SensorID &&
		eqInt(a.Data, b.Data) && eqInt(a.Previous, b.Previous) && a.At.Equal(b.At)
}

func eqInt(a, b *int) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// sightingsRecorder is a Sightings that remembers the latest time each sensor was
// seen and restores one chosen sensor the first time it is seen.
type sightingsRecorder struct {
	mu       sync.Mutex
	seen     map[string]time.Time
	restore  string
	restored bool
	lostAt   time.Time
}

func (s *sightingsRecorder) Record(_ context.Context, seen map[string]time.Time) ([]event.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []event.Event
	for id, at := range seen {
		if prev, ok := s.seen[id]; !ok || at.After(prev) {
			s.seen[id] = at
		}
		if id == s.restore && !s.restored {
			s.restored = true
			out = append(out, s.restoredEvent(at))
		}
	}
	return out, nil
}

func (s *sightingsRecorder) restoredEvent(at time.Time) event.Event {
	return event.Event{ID: event.ConnectionRestoredID(s.restore, s.lostAt), Type: event.ConnectionRestored,
		SensorID: s.restore, At: at, SilentFor: 3600}
}
