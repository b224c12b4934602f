package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/reading"
	"github.com/lockstream/lockstream/stream"
)

// worker applies one partition's batches in order (stream.PartitionHandler).
// Everything in it is touched only by the partition's goroutine.
type worker struct {
	c         *Consumer
	client    *kgo.Client
	partition int32
	label     string // the partition as a metric label
	cache     sensorCache
	// topics are the topic ids met, numbered for cached.topic; topic is the
	// current batch's number.
	topics [][16]byte
	topic  uint16
	// batch numbers attempts at batches, for the stamps in cached.
	batch uint64
	// Scratch space every batch reuses. The sensors the cache lacks are
	// missKeys (missIdx finds an id's place), resolved to slots in missSlots
	// (-1: not registered); unreg counts the batch's unregistered readings.
	readings  []valid
	missKeys  []sensorKey
	missIdx   map[sensorKey]int32
	missSlots []int32
	unreg     map[sensorKey]seenCount
	changed   []int32
	undo      []undoEntry
	seen      []int32
	// stored closes once the state writer has stored the changes of the last
	// batch handed to it, and so of every earlier one.
	stored <-chan struct{}
}

func newWorker(c *Consumer, client *kgo.Client, partition int32) *worker {
	stored := make(chan struct{})
	close(stored)
	return &worker{c: c, client: client, partition: partition, label: partitionLabel(partition), cache: newSensorCache(),
		missIdx: map[sensorKey]int32{}, unreg: map[sensorKey]seenCount{}, stored: stored}
}

// Handle applies a batch up to its events, retrying with back-off until that
// succeeds or ctx ends (the partition is revoked or the consumer stops:
// nothing is marked, and the batch is consumed again by whoever owns the
// partition next), then hands its state changes to the state writer and
// returns what closes once they are stored. An attempt in progress is not
// cancelled; it has its own deadline, BatchTimeout.
func (w *worker) Handle(ctx context.Context, b stream.Batch) (stream.Pending, error) {
	c := w.c
	recs := b.Records
	c.metrics.lag.WithLabelValues(w.label).Set(float64(b.HighWatermark - recs[len(recs)-1].Offset - 1))
	w.topic = w.topicIndex(b.TopicID)
	if w.cache.len() > c.cfg.CacheSize {
		// The cache starts over from Postgres, so Postgres must first hold
		// every state the cache changed.
		select {
		case <-w.stored:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		w.cache.reset()
	}
	start := time.Now()
	backoff := c.cfg.MinBackoff
	// Events Sightings returned in a failed attempt: asking again may not return
	// them, so they are carried into the next attempt.
	var carried []event.Event
	dlqMax := c.cfg.DLQMaxBytes
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.BatchTimeout)
		err := w.process(actx, recs, &carried, dlqMax)
		cancel()
		if err == nil {
			return w.handStates(ctx, len(recs), start)
		}
		if errors.Is(err, kerr.MessageTooLarge) {
			// The DLQ topic takes less than DLQMaxBytes: cut harder.
			dlqMax = minDLQMaxBytes
		}
		c.metrics.batchErrors.Inc()
		c.logger.Error("batch failed; retrying", "partition", w.partition,
			"first_offset", recs[0].Offset, "records", len(recs), "attempt", attempt, "retry_in", backoff, "err", err)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
		backoff = min(2*backoff, c.cfg.MaxBackoff)
	}
}

// handStates hands the batch's state changes (none, possibly) to the state
// writer, which counts the batch consumed once they are stored: the Pending
// closes then.
func (w *worker) handStates(ctx context.Context, records int, start time.Time) (stream.Pending, error) {
	changes := make([]StateChange, len(w.changed))
	for i, slot := range w.changed {
		s := w.cache.at(slot)
		changes[i] = StateChange{SensorID: s.key.String(), Data: int(s.data),
			ChangedAt: time.Unix(0, s.changedAt), TopicID: w.topics[s.topic], Partition: s.partition, Offset: s.offset}
		if s.unstableSince != 0 {
			changes[i].UnstableSince = time.Unix(0, s.unstableSince)
		}
	}
	m := w.c.metrics
	done, err := w.c.writer.hand(ctx, changes, func() {
		m.batchSize.Observe(float64(records))
		m.batchDuration.Observe(time.Since(start).Seconds())
		// Last, so that whoever sees a batch consumed also sees its other
		// counts and its states stored.
		m.consumed.Add(float64(records))
	})
	if err != nil {
		return nil, err
	}
	w.stored = done
	return done, nil
}

// Close forgets the partition: its cache goes with the worker, since the
// partition's next owner may change the state meanwhile.
func (w *worker) Close() {
	w.c.metrics.lag.DeleteLabelValues(w.label)
}

// valid is a reading that passed validation: its record, its sensor's cache
// slot and its data.
type valid struct {
	rec  *kgo.Record
	slot int32
	data int8
}

// undoEntry is a slot as it was before a batch changed it.
type undoEntry struct {
	slot int32
	was  cached
}

// topicIndex returns the worker's number for topic id id.
func (w *worker) topicIndex(id [16]byte) uint16 {
	for i, t := range w.topics {
		if t == id {
			return uint16(i)
		}
	}
	w.topics = append(w.topics, id)
	return uint16(len(w.topics) - 1)
}

// rejects are a batch's invalid records: their DLQ copies and counts by reason.
type rejects struct {
	dlq      []*kgo.Record
	byReason map[string]int
}

// process applies one batch up to its events: parse, compare with the cached
// state, then the effects (sightings recorded, events and DLQ records
// produced); the slots changed are left in w.changed for the state writer.
// Each step is one round trip per batch, not per record, and a record costs
// one cache lookup and no allocation unless it is rejected or changes its
// sensor's state.
//
// The comparison updates the cache in place; if a later step fails, the slots it
// changed are put back, so the retry finds the same changes again.
func (w *worker) process(ctx context.Context, recs []*kgo.Record, carried *[]event.Event, dlqMax int) (err error) {
	w.batch++
	rej, err := w.parse(recs, dlqMax)
	if err != nil {
		return err
	}
	if err := w.loadMisses(ctx); err != nil {
		return err
	}
	// From here on slots change; undo them unless the batch is stored.
	w.changed, w.undo, w.seen = w.changed[:0], w.undo[:0], w.seen[:0]
	defer func() {
		if err != nil {
			for _, u := range slices.Backward(w.undo) {
				*w.cache.at(u.slot) = u.was
			}
		}
	}()
	events, unknowns := w.compare()
	if err := w.effects(ctx, rej.dlq, events, carried); err != nil {
		return err
	}
	if len(w.unreg) > 0 && w.c.unregistered != nil {
		w.c.summary.add(w.c.cfg.Now(), w.unreg)
	}

	m := w.c.metrics
	for reason, n := range rej.byReason {
		m.rejected.WithLabelValues(reason).Add(float64(n))
	}
	changes, unstable, held := 0, 0, 0
	for _, e := range events {
		switch {
		case e.Type == event.StateChanged:
			changes++
			if e.Held {
				held++
			}
		case e.Type == event.SensorUnstable:
			unstable++
		}
	}
	m.changed.Add(float64(changes))
	m.unstable.Add(float64(unstable))
	m.held.Add(float64(held))
	m.unknown.Add(float64(unknowns))
	return nil
}

// parse validates the batch's records: the valid ones go to w.readings with
// their cache slots (the sensors the cache lacks to w.missKeys, their readings
// with slot -1-i for missKeys[i]), the others become DLQ records.
func (w *worker) parse(recs []*kgo.Record, dlqMax int) (rejects, error) {
	var rej rejects
	w.readings, w.missKeys = w.readings[:0], w.missKeys[:0]
	clear(w.missIdx)
	for _, r := range recs {
		raw, err := reading.ParseKeyed(r.Key, r.Value)
		if err != nil {
			var re *reading.RejectError
			if !errors.As(err, &re) {
				return rejects{}, fmt.Errorf("parsing record %d: %w", r.Offset, err)
			}
			if rej.byReason == nil {
				rej.byReason = map[string]int{}
			}
			rej.byReason[re.Reason]++
			rej.dlq = append(rej.dlq, w.c.dlqRecord(r, re, dlqMax))
			continue
		}
		k := keyOf(raw.ID)
		slot, ok := w.cache.lookup(k)
		if !ok {
			i, seen := w.missIdx[k]
			if !seen {
				i = int32(len(w.missKeys))
				w.missIdx[k] = i
				w.missKeys = append(w.missKeys, k)
			}
			slot = -1 - i
		}
		w.readings = append(w.readings, valid{rec: r, slot: slot, data: int8(raw.Data)})
	}
	return rej, nil
}

// compare walks the batch's readings against the cached states: it notes the
// sensors seen (w.seen), the slots changed (w.changed, with their old values
// in w.undo) and returns the state_changed events and how many readings were
// of unregistered sensors.
func (w *worker) compare() (events []event.Event, unknowns int) {
	batch, track, topic := w.batch, w.c.sightings != nil, w.topic
	topicID := w.topics[topic]
	clear(w.unreg)
	for _, v := range w.readings {
		offset, at := v.rec.Offset, v.rec.Timestamp
		slot := v.slot
		if slot < 0 {
			slot = w.missSlots[-1-slot]
		}
		if slot < 0 {
			// Unregistered: history only. Counted for the summary, and kept
			// nowhere else, so such ids cost no memory that grows.
			unknowns++
			k := w.missKeys[-1-v.slot]
			c := w.unreg[k]
			w.unreg[k] = seenCount{count: c.count + 1, last: max(c.last, at.UnixNano())}
			continue
		}
		v.slot = slot
		s := w.cache.at(slot)
		if track {
			switch nanos := at.UnixNano(); {
			case s.seenIn != batch:
				s.seenIn, s.seenAt = batch, nanos
				w.seen = append(w.seen, v.slot)
			case nanos > s.seenAt:
				s.seenAt = nanos
			}
		}
		if s.known && s.topic == topic && s.partition == w.partition && offset <= s.offset {
			// Stored before a restart or rebalance: its event was produced then.
			// (Only within one topic id: a topic created again starts at 0.)
			continue
		}
		if s.known && s.data == v.data {
			continue
		}
		if s.changedIn != batch {
			w.undo = append(w.undo, undoEntry{slot: v.slot, was: *s})
			w.changed = append(w.changed, v.slot)
			s.changedIn = batch
		}
		id := s.key.String()
		data := int(v.data)
		e := event.Event{ID: event.StateChangedID(id, topicID, w.partition, offset), Type: event.StateChanged,
			SensorID: id, Data: &data, At: at}
		if s.known {
			previous := int(s.data)
			e.Previous = &previous
		}
		events = w.judgeFlapping(s, e, events)
		s.known, s.data, s.changedAt, s.topic, s.partition, s.offset = true, v.data, at.UnixNano(), topic, w.partition, offset
	}
	return events, unknowns
}

// judgeFlapping appends the state change e of the sensor in s (s still holds
// the state before it) to events, judging the sensor's flapping: a change
// after a quiet FlapWindow ends an unstable streak (sensor_stable with the
// state before it, the id the heartbeat would give it too); the change that
// makes more than FlapChanges within a window starts one (sensor_unstable);
// a change within a streak is held (history only).
func (w *worker) judgeFlapping(s *cached, e event.Event, events []event.Event) []event.Event {
	window, at := w.c.cfg.FlapWindow.Nanoseconds(), e.At.UnixNano()
	if s.unstableSince != 0 && at-s.changedAt >= window {
		since := time.Unix(0, s.unstableSince)
		last := int(s.data)
		events = append(events, event.Event{ID: event.SensorStableID(e.SensorID, since), Type: event.SensorStable,
			SensorID: e.SensorID, Data: &last, At: time.Unix(0, s.changedAt+window).UTC()})
		s.unstableSince, s.flapStart, s.flapCount = 0, 0, 0
	}
	if at-s.flapStart > window {
		s.flapStart, s.flapCount = at, 0
	}
	s.flapCount++
	e.Held = s.unstableSince != 0
	events = append(events, e)
	if s.unstableSince == 0 && int(s.flapCount) > w.c.cfg.FlapChanges {
		s.unstableSince = at
		e.Held = true
		events[len(events)-1] = e
		events = append(events, event.Event{ID: event.SensorUnstableID(e.SensorID, e.At), Type: event.SensorUnstable,
			SensorID: e.SensorID, Data: e.Data, At: e.At})
	}
	return events
}

// effects makes the batch's events durable: sightings recorded (their events
// carried into retries), then events and DLQ records produced. The changed
// states are stored after it, by the state writer: an event is produced before
// its state is stored, so a crash between the two replays the reading and
// produces the same event (same id) again.
func (w *worker) effects(ctx context.Context, dlq []*kgo.Record, events []event.Event, carried *[]event.Event) error {
	c := w.c
	if c.sightings != nil && len(w.seen) > 0 {
		seen := make(map[string]time.Time, len(w.seen))
		for _, slot := range w.seen {
			s := w.cache.at(slot)
			seen[s.key.String()] = time.Unix(0, s.seenAt)
		}
		restored, err := c.sightings.Record(ctx, seen)
		if err != nil {
			return fmt.Errorf("recording sightings: %w", err)
		}
		*carried = mergeEvents(*carried, restored)
	}
	out := dlq
	for _, e := range append(append([]event.Event(nil), *carried...), events...) {
		value, err := e.Encode()
		if err != nil {
			return fmt.Errorf("encoding event %s: %w", e.ID, err)
		}
		out = append(out, &kgo.Record{Topic: c.cfg.Stream.EventsTopic(), Key: []byte(e.SensorID), Value: value})
	}
	if len(out) > 0 {
		if err := w.client.ProduceSync(ctx, out...).FirstErr(); err != nil {
			return fmt.Errorf("producing %d events and %d rejects: %w", len(out)-len(dlq), len(dlq), err)
		}
	}
	return nil
}

// loadMisses reads the registration and state of the batch's sensors the cache
// lacks, in one query, and caches the registered ones (w.missSlots gets their
// slots, -1 for the others). What Postgres holds is true whatever happens to the
// rest of the batch, so it stays cached even if the batch fails.
func (w *worker) loadMisses(ctx context.Context) error {
	w.missSlots = w.missSlots[:0]
	if len(w.missKeys) == 0 {
		return nil
	}
	ids := make([]string, len(w.missKeys))
	for i, k := range w.missKeys {
		ids[i] = k.String()
	}
	found, err := w.c.states.LookupSensors(ctx, ids)
	if err != nil {
		return fmt.Errorf("loading state of %d sensors: %w", len(ids), err)
	}
	if len(found) != len(ids) {
		return fmt.Errorf("loading state of %d sensors: got %d answers", len(ids), len(found))
	}
	for i, k := range w.missKeys {
		if !found[i].Registered {
			w.missSlots = append(w.missSlots, -1)
			continue
		}
		slot := w.cache.slot(k)
		s := w.cache.at(slot)
		if st := found[i].State; st != nil {
			s.known, s.data, s.changedAt, s.topic, s.partition, s.offset =
				true, int8(st.Data), st.ChangedAt.UnixNano(), w.topicIndex(st.TopicID), st.Partition, st.Offset
			if !st.UnstableSince.IsZero() {
				s.unstableSince = st.UnstableSince.UnixNano()
			}
		}
		w.missSlots = append(w.missSlots, slot)
	}
	return nil
}

// Headers of a DLQ record cut to fit: the value's (and key's) size before.
const (
	HeaderOriginalSize    = "original-size"
	HeaderOriginalKeySize = "original-key-size"
)

// minDLQMaxBytes is the least DLQMaxBytes, and the bound the consumer falls back
// to when the broker refuses a DLQ record as too large.
const minDLQMaxBytes = 16 << 10

// dlqKeyMax bounds the key of a DLQ record cut to fit.
const dlqKeyMax = 1 << 10

// dlqRecord is the DLQ copy of a rejected record, with the reason in its
// headers. A record over max bytes (key, value and headers) has its value cut,
// and its key too when that is large, with the sizes before in
// original-size and original-key-size: the record that was too large for the
// DLQ is exactly the one that must not stop the partition.
func (c *Consumer) dlqRecord(r *kgo.Record, rej *reading.RejectError, limit int) *kgo.Record {
	out := &kgo.Record{
		Topic: c.cfg.Stream.DLQTopic(),
		Key:   r.Key,
		Value: r.Value,
		Headers: []kgo.RecordHeader{
			{Key: reading.HeaderError, Value: []byte(rej.Reason)},
			{Key: reading.HeaderDetail, Value: []byte(rej.Detail)},
			{Key: reading.HeaderSource, Value: fmt.Appendf(nil, "%s/%d/%d", r.Topic, r.Partition, r.Offset)},
		},
	}
	// What a record costs beyond its bytes: the batch header (61 bytes), the
	// record's varints and the headers' lengths; 256 bytes is ample.
	size := len(out.Key) + len(out.Value) + 256
	for _, h := range out.Headers {
		size += len(h.Key) + len(h.Value)
	}
	if size <= limit {
		return out
	}
	if len(out.Key) > dlqKeyMax {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: HeaderOriginalKeySize, Value: strconv.AppendInt(nil, int64(len(r.Key)), 10)})
		size -= len(out.Key) - dlqKeyMax
		out.Key = out.Key[:dlqKeyMax]
	}
	if size > limit {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: HeaderOriginalSize, Value: strconv.AppendInt(nil, int64(len(r.Value)), 10)})
		out.Value = out.Value[:len(out.Value)-min(len(out.Value), size+64-limit)]
	}
	return out
}

// mergeEvents appends to a the events of b whose ids it lacks.
func mergeEvents(a, b []event.Event) []event.Event {
	for _, e := range b {
		if !slices.ContainsFunc(a, func(have event.Event) bool { return have.ID == e.ID }) {
			a = append(a, e)
		}
	}
	return a
}
