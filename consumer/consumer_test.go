package consumer_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/internal/runtest"
	"github.com/lockstream/lockstream/reading"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := consumer.Config{}
	ok.Stream.Brokers = []string{"127.0.0.1:9092"}
	if err := ok.WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	bad := ok.WithDefaults()
	bad.MaxBackoff = time.Millisecond
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "MaxBackoff") {
		t.Fatalf("Validate = %v, want an error naming MaxBackoff", err)
	}
	if err := (consumer.Config{}).WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "Brokers") {
		t.Fatalf("Validate = %v, want an error naming Brokers", err)
	}
	h := history.Config{}
	h.Stream.Brokers = ok.Stream.Brokers
	h = h.WithDefaults()
	if h.FlushRows != history.DefaultFlushRows || h.FlushInterval != time.Second {
		t.Fatalf("history defaults = %d rows, %v", h.FlushRows, h.FlushInterval)
	}
	h.FlushRows = -1
	if err := h.Validate(); err == nil || !strings.Contains(err.Error(), "FlushRows") {
		t.Fatalf("Validate = %v, want an error naming FlushRows", err)
	}
}

// TestKnownPattern runs the state consumer and the history writer over a
// 12-partition topic holding repeats, flips and every kind of bad record, and
// checks every output exactly: sensor_state, the events topic, the DLQ, metrics,
// the Sightings hook and ClickHouse. Small polls and flushes make many batches
// of a few records each; TestScale runs the same at scale with the defaults.
func TestKnownPattern(t *testing.T) {
	t.Parallel()
	runKnownPattern(t, knownPattern{seed: 1, sensors: 300, records: 3000,
		consumer: consumer.Config{MaxPollRecords: 400, UnregisteredFlushInterval: 100 * time.Millisecond},
		history:  history.Config{FlushRows: 700, FlushInterval: 200 * time.Millisecond}})
}

// knownPattern sizes a runKnownPattern run. The Stream fields of the configs
// are filled in.
type knownPattern struct {
	seed             uint64
	sensors, records int
	consumer         consumer.Config
	history          history.Config
}

// runKnownPattern produces pattern(p.seed, p.sensors, p.records) to a
// 12-partition topic, registers every tenth sensor, runs the state consumer and
// the history writer over it and checks every output exactly.
func runKnownPattern(t *testing.T, p knownPattern) {
	ctx := context.Background()
	stores := storagetest.New(t)
	cfg := streamtest.Config(t, 12)
	producer := streamtest.Client(t, cfg)

	registered := map[string]bool{}
	for i := 0; i < p.sensors; i += 10 {
		id := fmt.Sprintf("s%d", i)
		if _, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: id, Address: "somewhere"}); err != nil {
			t.Fatal(err)
		}
		registered[id] = true
	}
	records := produce(t, producer, cfg, pattern(p.seed, p.sensors, p.records))
	at := timestamps(t, cfg)
	want := expect(records, at, streamtest.TopicID(t, cfg, cfg.ReadingsTopic()), registered)

	sightings := &sightingsRecorder{seen: map[string]time.Time{}, restore: "s10",
		lostAt: time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)}
	ccfg, hcfg := p.consumer, p.history
	ccfg.Stream, hcfg.Stream = cfg, cfg
	c, reg := startConsumer(t, ccfg, consumer.NewPostgresStore(stores.Postgres), sightings)
	historyReg := prometheus.NewRegistry()
	hw, err := history.New(hcfg, history.NewClickHouseStore(stores.ClickHouse), historyReg, runtest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	h := runtest.Start(t, hw.Run)

	runtest.WaitFor(t, func() (bool, string) {
		got := metric(t, reg, "lockstream_readings_consumed_total", nil)
		return got >= float64(len(records)), fmt.Sprintf("consumed %v of %d records", got, len(records))
	})
	runtest.WaitFor(t, func() (bool, string) { return stateMatches(ctx, consumer.NewPostgresStore(stores.Postgres), want) })

	// Events: exactly the expected changes, in order per sensor, plus the one
	// connection_restored Sightings returned, ahead of s7's first change.
	got, total := decodeEvents(t, cfg)
	wantTotal := 1
	for id, changes := range want.changes {
		wantTotal += len(changes)
		have := got[id]
		if id == sightings.restore {
			if len(have) == 0 || have[0].Type != event.ConnectionRestored ||
				have[0].ID != event.ConnectionRestoredID(id, sightings.lostAt) {
				t.Fatalf("events of %s start with %+v, want the connection_restored", id, have)
			}
			have = have[1:]
		}
		if len(have) != len(changes) {
			t.Fatalf("sensor %s has %d events, want %d", id, len(have), len(changes))
		}
		for i := range changes {
			if !sameEvent(have[i], changes[i]) {
				t.Fatalf("event %d of %s = %+v, want %+v", i, id, have[i], changes[i])
			}
		}
	}
	if total != wantTotal {
		t.Fatalf("events topic holds %d events, want %d", total, wantTotal)
	}

	// DLQ: every bad record, once, as received, with its reason and origin.
	dlq := streamtest.ReadAll(t, cfg, cfg.DLQTopic())
	if len(dlq) != len(want.bad) {
		t.Fatalf("DLQ holds %d records, want %d", len(dlq), len(want.bad))
	}
	byReason := map[string]int{}
	for _, r := range dlq {
		headers := map[string]string{}
		for _, h := range r.Headers {
			headers[h.Key] = string(h.Value)
		}
		src := strings.Split(headers[reading.HeaderSource], "/")
		if len(src) != 3 || src[0] != cfg.ReadingsTopic() {
			t.Fatalf("DLQ record with source %q", headers[reading.HeaderSource])
		}
		p, _ := strconv.ParseInt(src[1], 10, 32)
		o, _ := strconv.ParseInt(src[2], 10, 64)
		orig, ok := want.bad[[2]int64{p, o}]
		switch {
		case !ok:
			t.Fatalf("DLQ holds %d/%d, which was valid", p, o)
		case headers[reading.HeaderError] != orig.reason:
			t.Fatalf("DLQ reason for %.50q is %q (%s), want %q", orig.value, headers[reading.HeaderError],
				headers[reading.HeaderDetail], orig.reason)
		case string(r.Value) != string(orig.value) || string(r.Key) != string(orig.key):
			t.Fatalf("DLQ record %d/%d is not the original bytes", p, o)
		}
		byReason[orig.reason]++
	}

	// Every kind of bad record was there to be rejected.
	for _, reason := range []string{reading.ReasonNotJSON, reading.ReasonBadData, reading.ReasonBadSensorID,
		reading.ReasonKeyMismatch, reading.ReasonUnknownField, reading.ReasonBadTS, reading.ReasonTooLarge} {
		if byReason[reason] == 0 {
			t.Errorf("the pattern holds no record rejected for %s", reason)
		}
	}

	// Metrics agree with what happened.
	for reason, n := range byReason {
		if got := metric(t, reg, "lockstream_readings_rejected_total", map[string]string{"reason": reason}); got != float64(n) {
			t.Errorf("rejected{reason=%s} = %v, want %d", reason, got, n)
		}
	}
	if got := metric(t, reg, "lockstream_readings_changed_total", nil); got != float64(wantTotal-1) {
		t.Errorf("changed = %v, want %d", got, wantTotal-1)
	}
	checkFlapMetrics(t, reg, cfg)
	unknown := 0
	latest := map[string]time.Time{}
	for _, r := range want.valid {
		if !registered[r.sensor] {
			unknown++
			continue // no sighting either
		}
		if ts := at(r.partition, r.offset); ts.After(latest[r.sensor]) {
			latest[r.sensor] = ts
		}
	}
	if got := metric(t, reg, "lockstream_readings_unknown_sensor_total", nil); got != float64(unknown) {
		t.Errorf("unknown sensor readings = %v, want %d", got, unknown)
	}
	// The unregistered ids reach the hourly summary, counted exactly while there
	// are fewer than a page of it holds; past that, a page holds only ids that
	// really are unregistered.
	wantUnreg := map[string]int64{}
	for _, r := range want.valid {
		if !registered[r.sensor] {
			wantUnreg[r.sensor]++
		}
	}
	runtest.WaitFor(t, func() (bool, string) {
		const page = 1000
		top, err := consumer.NewPostgresStore(stores.Postgres).TopUnregistered(ctx, time.Now().Add(-time.Hour), page)
		if err != nil {
			return false, err.Error()
		}
		if len(top) != min(len(wantUnreg), page) {
			return false, fmt.Sprintf("%d unregistered ids stored, want %d", len(top), min(len(wantUnreg), page))
		}
		if len(wantUnreg) > page {
			for _, u := range top {
				if _, ok := wantUnreg[u.SensorID]; !ok {
					return false, fmt.Sprintf("%s listed as unregistered, but it is registered or never read", u.SensorID)
				}
			}
			return true, ""
		}
		for _, u := range top {
			if u.Count != wantUnreg[u.SensorID] || u.MinCount != u.Count {
				return false, fmt.Sprintf("%s counted %d (at least %d), want %d", u.SensorID, u.Count, u.MinCount, wantUnreg[u.SensorID])
			}
		}
		return true, ""
	})
	if got := metric(t, reg, "lockstream_consumer_batch_size", nil); got < 1 {
		t.Errorf("batch size histogram is empty")
	}
	sightings.mu.Lock()
	if len(sightings.seen) != len(latest) {
		t.Errorf("Sightings saw %d sensors, want %d", len(sightings.seen), len(latest))
	}
	for id, ts := range latest {
		if !sightings.seen[id].Equal(ts) {
			t.Errorf("Sightings last saw %s at %v, want %v", id, sightings.seen[id], ts)
		}
	}
	sightings.mu.Unlock()

	// ClickHouse: exactly the valid readings and every event.
	runtest.WaitFor(t, func() (bool, string) {
		readings := storagetest.AllReadings(t, stores.ClickHouseURL)
		events := withoutFlapping(storagetest.AllEvents(t, stores.ClickHouseURL))
		return len(readings) == len(want.valid) && len(events) == wantTotal,
			fmt.Sprintf("history: %d of %d readings, %d of %d events", len(readings), len(want.valid), len(events), wantTotal)
	})
	readings := storagetest.AllReadings(t, stores.ClickHouseURL)
	wantReadings := map[[2]int64]produced{}
	for _, r := range want.valid {
		wantReadings[[2]int64{int64(r.partition), r.offset}] = r
	}
	for _, r := range readings {
		w, ok := wantReadings[[2]int64{int64(r.Partition), r.Offset}]
		if !ok || r.SensorID != w.sensor || r.Data != w.data ||
			!r.ReceivedAt.Equal(at(r.Partition, r.Offset).Truncate(time.Second)) {
			t.Fatalf("ClickHouse reading %+v does not match the produced %+v", r, w)
		}
		delete(wantReadings, [2]int64{int64(r.Partition), r.Offset})
	}
	events := withoutFlapping(storagetest.AllEvents(t, stores.ClickHouseURL))
	wantEvents := map[string]event.Event{}
	for _, list := range got {
		for _, e := range list {
			wantEvents[e.ID] = e
		}
	}
	for _, e := range events {
		w, ok := wantEvents[e.ID]
		if !ok || e.Type != string(w.Type) || e.SensorID != w.SensorID || !eqInt(e.Data, w.Data) ||
			!eqInt(e.Previous, w.Previous) || !e.At.Equal(w.At.Truncate(time.Second)) {
			t.Fatalf("ClickHouse event %+v does not match the produced %+v", e, w)
		}
		delete(wantEvents, e.ID)
	}
	if len(wantEvents) != 0 {
		t.Fatalf("%d events missing from ClickHouse", len(wantEvents))
	}
	// The writer counts rows just after ClickHouse took them.
	runtest.WaitFor(t, func() (bool, string) {
		got := metric(t, historyReg, "lockstream_history_rows_written_total", nil)
		return got >= float64(len(want.valid)+wantTotal),
			fmt.Sprintf("history rows written = %v, want at least %d", got, len(want.valid)+wantTotal)
	})

	c.Stop(t)
	h.Stop(t)
}

// TestRestartAndRebalance stops consumers mid-stream while others join and
// leave; the final state is exact and no change is lost.
func TestRestartAndRebalance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	cfg := streamtest.Config(t, 6)
	producer := streamtest.Client(t, cfg)
	inputs := pattern(2, 200, 3600)
	ccfg := consumer.Config{Stream: cfg, MaxPollRecords: 100}
	for i := range 200 {
		if _, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: fmt.Sprintf("s%d", i), Address: "here"}); err != nil {
			t.Fatal(err)
		}
	}

	var records []produced
	records = append(records, produce(t, producer, cfg, inputs[:1200])...)
	a, regA := startConsumer(t, ccfg, consumer.NewPostgresStore(stores.Postgres), nil)
	runtest.WaitFor(t, func() (bool, string) {
		got := metric(t, regA, "lockstream_readings_consumed_total", nil)
		return got >= 300, fmt.Sprintf("first consumer at %v records", got)
	})

	// A second member joins mid-stream: the partitions are split between them.
	// The rebalance takes a heartbeat or two, so the stream trickles in until the
	// second member has processed some of it.
	b, regB := startConsumer(t, ccfg, consumer.NewPostgresStore(stores.Postgres), nil)
	next := 1200
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for next < 2400 && metric(t, regB, "lockstream_readings_consumed_total", nil) == 0 {
		records = append(records, produce(t, producer, cfg, inputs[next:next+10])...)
		next += 10
		<-ticker.C
	}
	records = append(records, produce(t, producer, cfg, inputs[next:2400])...)
	runtest.WaitFor(t, func() (bool, string) {
		got := metric(t, regB, "lockstream_readings_consumed_total", nil)
		return got > 0, "the second consumer to process a batch"
	})
	// The first leaves mid-stream (a clean stop: in-flight batches finish, marks
	// are committed), then the second is stopped and replaced by a third.
	a.Stop(t)
	records = append(records, produce(t, producer, cfg, inputs[2400:])...)
	b.Stop(t)
	startConsumer(t, ccfg, consumer.NewPostgresStore(stores.Postgres), nil)

	want := expect(records, timestamps(t, cfg), streamtest.TopicID(t, cfg, cfg.ReadingsTopic()), nil)
	runtest.WaitFor(t, func() (bool, string) { return stateMatches(ctx, consumer.NewPostgresStore(stores.Postgres), want) })
	runtest.WaitFor(t, func() (bool, string) {
		got, _ := decodeEvents(t, cfg)
		for id, changes := range want.changes {
			if n := len(dedup(got[id])); n < len(changes) {
				return false, fmt.Sprintf("sensor %s: %d of %d changes", id, n, len(changes))
			}
		}
		return true, ""
	})

	// Replays may repeat an event with the same id; after dropping repeats, the
	// events are exactly the expected ones in order.
	got, total := decodeEvents(t, cfg)
	unique := 0
	for id, changes := range want.changes {
		have := dedup(got[id])
		unique += len(have)
		if len(have) != len(changes) {
			t.Fatalf("sensor %s has %d distinct events, want %d", id, len(have), len(changes))
		}
		for i := range changes {
			if !sameEvent(have[i], changes[i]) {
				t.Fatalf("event %d of %s = %+v, want %+v", i, id, have[i], changes[i])
			}
		}
	}
	for id := range got {
		if _, ok := want.changes[id]; !ok {
			t.Fatalf("events for sensor %s, which never changed", id)
		}
	}
	t.Logf("%d distinct events, %d repeats after restarts", unique, total-unique)
}

func dedup(events []event.Event) []event.Event {
	seen := map[string]bool{}
	var out []event.Event
	for _, e := range events {
		if !seen[e.ID] {
			seen[e.ID] = true
			out = append(out, e)
		}
	}
	return out
}

// TestReplayAfterStoredStateEmitsNothingTwice covers a crash after the state was
// stored but before the offsets were committed: the replayed readings that the
// stored state already reflects produce no event again.
func TestReplayAfterStoredStateEmitsNothingTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	cfg := streamtest.Config(t, 2)
	producer := streamtest.Client(t, cfg, kgo.RecordPartitioner(kgo.ManualPartitioner()))

	var recs []*kgo.Record
	for _, data := range []int{1, 0, 1, 1, 0} {
		recs = append(recs, &kgo.Record{Topic: cfg.ReadingsTopic(), Partition: 1, Key: []byte("lock1"),
			Value: fmt.Appendf(nil, `{"sensor_id":"lock1","data":%d}`, data)})
	}
	if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// A previous run stored the change at offset 1 (data 0), then died.
	if _, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: "lock1", Address: "door"}); err != nil {
		t.Fatal(err)
	}
	topicID := streamtest.TopicID(t, cfg, cfg.ReadingsTopic())
	if err := consumer.NewPostgresStore(stores.Postgres).ApplyStateChanges(ctx, []consumer.StateChange{
		{SensorID: "lock1", Data: 0, ChangedAt: recs[1].Timestamp, TopicID: topicID, Partition: 1, Offset: 1},
	}); err != nil {
		t.Fatal(err)
	}

	c, reg := startConsumer(t, consumer.Config{Stream: cfg}, consumer.NewPostgresStore(stores.Postgres), nil)
	runtest.WaitFor(t, func() (bool, string) {
		got := metric(t, reg, "lockstream_readings_consumed_total", nil)
		return got >= 5, fmt.Sprintf("consumed %v of 5", got)
	})
	c.Stop(t)

	got, total := decodeEvents(t, cfg)
	if total != 2 {
		t.Fatalf("events topic holds %d events, want 2 (offsets 2 and 4): %+v", total, got)
	}
	for i, w := range []struct {
		offset         int64
		data, previous int
	}{{2, 1, 0}, {4, 0, 1}} {
		e := got["lock1"][i]
		if e.ID != event.StateChangedID("lock1", topicID, 1, w.offset) || *e.Data != w.data || e.Previous == nil || *e.Previous != w.previous {
			t.Fatalf("event %d = %+v, want offset %d data %d previous %d", i, e, w.offset, w.data, w.previous)
		}
	}
	state, err := consumer.NewPostgresStore(stores.Postgres).LookupSensors(ctx, []string{"lock1"})
	if err != nil {
		t.Fatal(err)
	}
	if s := state[0].State; s == nil || s.Data != 0 || s.Offset != 4 {
		t.Fatalf("state = %+v, want data 0 from offset 4", s)
	}
}

// checkFlapMetrics compares the flapping judgement's counters with the events
// topic: one sensor_unstable counted per such event, one held change per
// state_changed marked held. The pattern flips sensors fast enough to make
// some unstable, so a count of zero is a failure too.
func checkFlapMetrics(t *testing.T, reg *prometheus.Registry, cfg stream.Config) {
	t.Helper()
	unstable, held := 0, 0
	for _, r := range streamtest.ReadAll(t, cfg, cfg.EventsTopic()) {
		e, err := event.Decode(r.Value)
		if err != nil {
			t.Fatalf("events topic holds %q: %v", r.Value, err)
		}
		switch {
		case e.Type == event.SensorUnstable:
			unstable++
		case e.Type == event.StateChanged && e.Held:
			held++
		}
	}
	if unstable == 0 || held == 0 {
		t.Fatalf("the pattern made %d sensors unstable and held %d changes; want some of each", unstable, held)
	}
	if got := metric(t, reg, "lockstream_readings_unstable_total", nil); got != float64(unstable) {
		t.Errorf("unstable = %v, want %d (sensor_unstable events on the topic)", got, unstable)
	}
	if got := metric(t, reg, "lockstream_readings_held_total", nil); got != float64(held) {
		t.Errorf("held = %v, want %d (held changes on the topic)", got, held)
	}
}
