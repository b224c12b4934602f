package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/reading"
	"github.com/lockstream/lockstream/storage"
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
	// batch numbers attempts at batches, for the stamps in cached.
	batch uint64
	// Scratch space every batch reuses.
	readings []valid
	misses   []int32
	changed  []int32
	undo     []undoEntry
	seen     []int32
}

func newWorker(c *Consumer, client *kgo.Client, partition int32) *worker {
	return &worker{c: c, client: client, partition: partition, label: partitionLabel(partition), cache: newSensorCache()}
}

// Handle applies a batch, retrying with back-off until it succeeds or ctx ends
// (the partition is revoked or the consumer stops: nothing is marked, and the
// batch is consumed again by whoever owns the partition next). An attempt in
// progress is not cancelled; it has its own deadline, BatchTimeout.
func (w *worker) Handle(ctx context.Context, b stream.Batch) (stream.Pending, error) {
	c := w.c
	recs := b.Records
	c.metrics.lag.WithLabelValues(w.label).Set(float64(b.HighWatermark - recs[len(recs)-1].Offset - 1))
	backoff := c.cfg.MinBackoff
	// Events Sightings returned in a failed attempt: asking again may not return
	// them, so they are carried into the next attempt.
	var carried []event.Event
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.BatchTimeout)
		err := w.process(actx, recs, &carried)
		cancel()
		if err == nil {
			return nil, nil
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

// rejects are a batch's invalid records: their DLQ copies and counts by reason.
type rejects struct {
	dlq      []*kgo.Record
	byReason map[string]int
}

// process applies one batch: parse, compare with the cached state, then the
// effects (sightings, events and DLQ records produced, states stored). Each
// step is one round trip per batch, not per record, and a record costs one
// cache lookup and no allocation unless it is rejected or changes its
// sensor's state.
//
// The comparison updates the cache in place; if a later step fails, the slots it
// changed are put back, so the retry finds the same changes again.
func (w *worker) process(ctx context.Context, recs []*kgo.Record, carried *[]event.Event) (err error) {
	start := time.Now()
	w.batch++
	rej, err := w.parse(recs)
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
	if w.cache.len() > w.c.cfg.CacheSize {
		w.cache.reset()
	}

	m := w.c.metrics
	for reason, n := range rej.byReason {
		m.rejected.WithLabelValues(reason).Add(float64(n))
	}
	m.changed.Add(float64(len(events)))
	m.unknown.Add(float64(unknowns))
	m.batchSize.Observe(float64(len(recs)))
	m.batchDuration.Observe(time.Since(start).Seconds())
	// Last, so that whoever sees a batch consumed also sees its other counts.
	m.consumed.Add(float64(len(recs)))
	return nil
}

// parse validates the batch's records: the valid ones go to w.readings with
// their cache slots (the sensors the cache lacks to w.misses), the others
// become DLQ records.
func (w *worker) parse(recs []*kgo.Record) (rejects, error) {
	var rej rejects
	w.readings, w.misses = w.readings[:0], w.misses[:0]
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
			rej.dlq = append(rej.dlq, w.c.dlqRecord(r, re))
			continue
		}
		slot := w.cache.slot(keyOf(raw.ID))
		if s := w.cache.at(slot); !s.loaded && s.missIn != w.batch {
			s.missIn = w.batch
			w.misses = append(w.misses, slot)
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
	batch, track := w.batch, w.c.sightings != nil
	for _, v := range w.readings {
		s := w.cache.at(v.slot)
		offset, at := v.rec.Offset, v.rec.Timestamp
		if !s.registered {
			unknowns++
		}
		if track {
			switch nanos := at.UnixNano(); {
			case s.seenIn != batch:
				s.seenIn, s.seenAt = batch, nanos
				w.seen = append(w.seen, v.slot)
			case nanos > s.seenAt:
				s.seenAt = nanos
			}
		}
		if s.known && s.partition == w.partition && offset <= s.offset {
			// Stored before a restart or rebalance: its event was produced then.
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
		e := event.Event{ID: event.StateChangedID(id, w.partition, offset), Type: event.StateChanged,
			SensorID: id, Data: &data, At: at}
		if s.known {
			previous := int(s.data)
			e.Previous = &previous
		}
		events = append(events, e)
		s.known, s.data, s.changedAt, s.partition, s.offset = true, v.data, at.UnixNano(), w.partition, offset
	}
	return events, unknowns
}

// effects makes the batch durable: sightings recorded (their events carried
// into retries), events and DLQ records produced, then the changed states
// stored; an event is produced before its state is stored, so a crash between
// the two replays the reading and produces the same event (same id) again.
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
	if len(w.changed) == 0 {
		return nil
	}
	changes := make([]storage.StateChange, len(w.changed))
	for i, slot := range w.changed {
		s := w.cache.at(slot)
		changes[i] = storage.StateChange{SensorID: s.key.String(), Data: int(s.data),
			ChangedAt: time.Unix(0, s.changedAt), Partition: s.partition, Offset: s.offset}
	}
	if err := c.states.ApplyStateChanges(ctx, changes); err != nil {
		return fmt.Errorf("storing states: %w", err)
	}
	return nil
}

// loadMisses reads the state of the batch's sensors the cache lacks, in one
// query. What Postgres holds is true whatever happens to the rest of the batch,
// so it stays cached even if the batch fails.
func (w *worker) loadMisses(ctx context.Context) error {
	if len(w.misses) == 0 {
		return nil
	}
	ids := make([]string, len(w.misses))
	for i, slot := range w.misses {
		ids[i] = w.cache.at(slot).key.String()
	}
	found, err := w.c.states.LookupSensors(ctx, ids)
	if err != nil {
		return fmt.Errorf("loading state of %d sensors: %w", len(ids), err)
	}
	if len(found) != len(ids) {
		return fmt.Errorf("loading state of %d sensors: got %d answers", len(ids), len(found))
	}
	for i, slot := range w.misses {
		s := w.cache.at(slot)
		s.loaded, s.registered = true, found[i].Registered
		if st := found[i].State; st != nil {
			s.known, s.data, s.changedAt, s.partition, s.offset =
				true, int8(st.Data), st.ChangedAt.UnixNano(), st.Partition, st.Offset
		}
	}
	return nil
}

// dlqRecord is the DLQ copy of a rejected record, with the reason in its headers.
func (c *Consumer) dlqRecord(r *kgo.Record, rej *reading.RejectError) *kgo.Record {
	return &kgo.Record{
		Topic: c.cfg.Stream.DLQTopic(),
		Key:   r.Key,
		Value: r.Value,
		Headers: []kgo.RecordHeader{
			{Key: reading.HeaderError, Value: []byte(rej.Reason)},
			{Key: reading.HeaderDetail, Value: []byte(rej.Detail)},
			{Key: reading.HeaderSource, Value: fmt.Appendf(nil, "%s/%d/%d", r.Topic, r.Partition, r.Offset)},
		},
	}
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
