// Package consumer turns the readings stream into sensor state.
//
// Consumer (the state consumer) reads lockstream.readings in a consumer group with
// one worker per assigned partition: it rejects bad readings to the DLQ, compares
// each reading with the sensor's last state, produces a state_changed event for
// every change, stores the new states in Postgres and only then commits. The
// history writer (package history) is a second group that copies the readings
// and events into ClickHouse.
package consumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/reading"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/stream"
)

// StateStore is where sensor state lives (storage.Postgres).
type StateStore interface {
	// LookupSensors returns, for every id in order, whether it is registered and
	// its state.
	LookupSensors(ctx context.Context, ids []string) ([]storage.SensorLookup, error)
	// ApplyStateChanges stores changes, ignoring any older than the stored state.
	ApplyStateChanges(ctx context.Context, changes []storage.StateChange) error
}

// Sightings is told about every valid reading, for heartbeat bookkeeping.
//
// Record gets, once per batch, each sensor seen in it with the latest receive time,
// and returns the events the sightings cause (connection_restored for a sensor
// that was lost). The consumer produces them with the batch's own events, before
// the batch is committed. A failed batch is retried with the events Record already
// returned, but a crash between Record and the produce loses them unless Record
// returns the same events when asked again about the same sightings.
type Sightings interface {
	Record(ctx context.Context, seen map[string]time.Time) ([]event.Event, error)
}

// Defaults of Config.
const (
	DefaultGroup           = "lockstream-state"
	DefaultMaxPollRecords  = 100_000
	DefaultBatchTimeout    = 30 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
	DefaultMinBackoff      = 100 * time.Millisecond
	DefaultMaxBackoff      = 10 * time.Second
	DefaultCacheSize       = 1_000_000
)

// Config configures the state consumer.
type Config struct {
	// Stream says where Kafka is and names the topics. Brokers is required.
	Stream stream.Config
	// Group is the consumer group; processes in the same group share partitions.
	// Defaults to DefaultGroup ("lockstream-state").
	Group string
	// MaxPollRecords bounds the records taken from Kafka at once, and so a
	// batch, which is one partition's share of a poll. The client buffers each
	// partition's records in chunks of up to a MiB (tens of thousands of
	// readings) and a poll takes them in partition order, so a bound well below
	// a chunk feeds one worker poll after poll while the others idle. A
	// rebalance waits for the batches in progress, which at this size take well
	// under a second. Defaults to DefaultMaxPollRecords (100,000).
	MaxPollRecords int
	// BatchTimeout bounds one attempt at a batch's effects (state load, produce,
	// upsert); a failed attempt is retried with back-off. Defaults to
	// DefaultBatchTimeout (30 s).
	BatchTimeout time.Duration
	// ShutdownTimeout bounds finishing in-flight batches and the final commit once
	// Run's context is cancelled. Defaults to DefaultShutdownTimeout (30 s).
	ShutdownTimeout time.Duration
	// MinBackoff is the first wait before retrying a failed batch; it doubles up to
	// MaxBackoff. Defaults to DefaultMinBackoff (100 ms).
	MinBackoff time.Duration
	// MaxBackoff caps the wait between retries. Defaults to DefaultMaxBackoff (10 s).
	MaxBackoff time.Duration
	// CacheSize bounds the sensors whose state a partition worker caches; past it
	// the cache starts over from Postgres. Defaults to DefaultCacheSize (1,000,000).
	CacheSize int
}

// WithDefaults returns the config with every unset field set to its default.
func (c Config) WithDefaults() Config {
	c.Stream = c.Stream.WithDefaults()
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = DefaultMaxPollRecords
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = DefaultBatchTimeout
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.CacheSize == 0 {
		c.CacheSize = DefaultCacheSize
	}
	return c
}

// Validate reports the first field that cannot work.
func (c Config) Validate() error {
	if err := c.Stream.Validate(); err != nil {
		return fmt.Errorf("consumer config: Stream: %w", err)
	}
	switch {
	case c.MaxPollRecords < 1:
		return fmt.Errorf("consumer config: MaxPollRecords: %d, want at least 1", c.MaxPollRecords)
	case c.BatchTimeout <= 0:
		return fmt.Errorf("consumer config: BatchTimeout: %v, want more than 0", c.BatchTimeout)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("consumer config: ShutdownTimeout: %v, want more than 0", c.ShutdownTimeout)
	case c.MinBackoff <= 0:
		return fmt.Errorf("consumer config: MinBackoff: %v, want more than 0", c.MinBackoff)
	case c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("consumer config: MaxBackoff: %v is less than MinBackoff %v", c.MaxBackoff, c.MinBackoff)
	case c.CacheSize < 1:
		return fmt.Errorf("consumer config: CacheSize: %d, want at least 1", c.CacheSize)
	}
	return nil
}

// Consumer is the state consumer. Create it with New and start it with Run.
type Consumer struct {
	cfg       Config
	states    StateStore
	sightings Sightings
	logger    *slog.Logger
	metrics   *stateMetrics
	started   atomic.Bool

	// base is the context batches run on: Run's, without its cancellation, so a
	// batch in flight at shutdown finishes (each attempt has its own deadline).
	base   context.Context
	client *kgo.Client

	mu      sync.Mutex
	workers map[int32]*worker
}

// New returns a state consumer. sightings may be nil. Its metrics are registered
// with reg; a nil logger logs nothing.
func New(cfg Config, states StateStore, sightings Sightings, reg prometheus.Registerer, logger *slog.Logger) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if states == nil {
		return nil, errors.New("consumer: nil StateStore")
	}
	m, err := newStateMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Consumer{
		cfg:       cfg,
		states:    states,
		sightings: sightings,
		logger:    logger.With("component", "consumer"),
		metrics:   m,
		workers:   map[int32]*worker{},
	}, nil
}

// Run consumes until ctx is cancelled, then finishes the batches in flight,
// commits their offsets and leaves the group, returning nil. It returns an error
// when Kafka cannot be reached at start. Run may be called once.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("consumer: Run called twice")
	}
	c.base = context.WithoutCancel(ctx)
	client, err := kgo.NewClient(append(stream.ClientOpts(c.cfg.Stream),
		stream.WithLogger(c.logger),
		kgo.ConsumerGroup(c.cfg.Group),
		kgo.ConsumeTopics(c.cfg.Stream.ReadingsTopic()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		// Workers mark a batch only after its effects are durable; marks are
		// committed every few seconds, on revoke and at shutdown.
		kgo.AutoCommitMarks(),
		// Polls and rebalances exclude each other, so a worker never receives a
		// batch of a partition that is being revoked. The trap: a member that does
		// not call AllowRebalance within the rebalance timeout is kicked out of the
		// group, so a poll round must stay short (MaxPollRecords).
		kgo.BlockRebalanceOnPoll(),
	)...)
	if err != nil {
		return fmt.Errorf("consumer: creating kafka client: %w", err)
	}
	c.client = client
	if err := client.Ping(ctx); err != nil {
		client.Close()
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("consumer: reaching kafka: %w", err)
	}
	c.logger.Info("consumer started", "group", c.cfg.Group, "topic", c.cfg.Stream.ReadingsTopic())

	for {
		fetches := client.PollRecords(ctx, c.cfg.MaxPollRecords)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			break
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			c.logger.Error("fetching", "topic", topic, "partition", partition, "err", err)
		})
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			last := p.Records[len(p.Records)-1]
			c.metrics.lag.WithLabelValues(partitionLabel(p.Partition)).Set(float64(p.HighWatermark - last.Offset - 1))
			w := c.worker(p.Partition)
			if w == nil {
				// Cannot happen with BlockRebalanceOnPoll: assignment precedes
				// fetching, and revoke waits for this poll round.
				c.logger.Error("records for a partition without a worker", "partition", p.Partition)
				return
			}
			// A worker still busy with earlier batches (a large one, or one
			// retried while a store is down) fills its queue and this send waits:
			// intake stops instead of memory growing.
			select {
			case w.batches <- p.Records:
			case <-ctx.Done():
			}
		})
		client.AllowRebalance()
	}

	c.logger.Info("consumer stopping: finishing batches in flight")
	client.AllowRebalance()
	c.stopWorkers(nil, true)
	commitCtx, cancel := context.WithTimeout(c.base, c.cfg.ShutdownTimeout)
	defer cancel()
	if err := client.CommitMarkedOffsets(commitCtx); err != nil {
		// Not fatal: the uncommitted batches are consumed again (same event ids).
		c.logger.Warn("final commit failed", "err", err)
	}
	client.Close()
	c.logger.Info("consumer stopped")
	return nil
}

func (c *Consumer) worker(partition int32) *worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.workers[partition]
}

func (c *Consumer) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, partition := range assigned[c.cfg.Stream.ReadingsTopic()] {
		w := newWorker(c, partition)
		c.workers[partition] = w
		go w.run()
	}
	if len(assigned[c.cfg.Stream.ReadingsTopic()]) > 0 {
		c.logger.Info("partitions assigned", "partitions", assigned[c.cfg.Stream.ReadingsTopic()])
	}
}

func (c *Consumer) revoked(ctx context.Context, client *kgo.Client, revoked map[string][]int32) {
	if len(revoked[c.cfg.Stream.ReadingsTopic()]) > 0 {
		c.logger.Info("partitions revoked", "partitions", revoked[c.cfg.Stream.ReadingsTopic()])
	}
	c.stopWorkers(revoked[c.cfg.Stream.ReadingsTopic()], false)
	if err := client.CommitMarkedOffsets(ctx); err != nil && !errors.Is(err, context.Canceled) {
		c.logger.Warn("commit on revoke failed", "err", err)
	}
}

func (c *Consumer) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.logger.Warn("partitions lost", "partitions", lost[c.cfg.Stream.ReadingsTopic()])
	// Another member may own these partitions already: committing could rewind
	// its progress, so the marks are dropped and the new owner replays them.
	c.stopWorkers(lost[c.cfg.Stream.ReadingsTopic()], false)
}

// stopWorkers stops the workers of partitions (every worker when all is set) and
// waits for each to finish the batch it is working on. Their caches go with them:
// a partition's next owner may have changed the state since.
func (c *Consumer) stopWorkers(partitions []int32, all bool) {
	c.mu.Lock()
	var stopping []*worker
	if all {
		for p := range c.workers {
			partitions = append(partitions, p)
		}
	}
	for _, p := range partitions {
		if w, ok := c.workers[p]; ok {
			stopping = append(stopping, w)
			delete(c.workers, p)
		}
	}
	c.mu.Unlock()
	for _, w := range stopping {
		close(w.quit)
	}
	for _, w := range stopping {
		<-w.done
		c.metrics.lag.DeleteLabelValues(partitionLabel(w.partition))
	}
}

// sensorKey is a sensor id as a cache key: the id's bytes, zero-padded. Ids are
// letters and digits, so the padding cannot be mistaken for part of an id; and a
// key holds no pointer, so looking one up needs no allocation and a cache of a
// million sensors gives the garbage collector nothing to scan.
type sensorKey [reading.MaxSensorIDLen]byte

func keyOf(id []byte) sensorKey {
	var k sensorKey
	copy(k[:], id)
	return k
}

func (k sensorKey) String() string {
	n := bytes.IndexByte(k[:], 0)
	if n < 0 {
		n = len(k)
	}
	return string(k[:n])
}

// cached is what a partition worker knows about one sensor. It holds no pointers
// (see sensorKey).
type cached struct {
	key sensorKey
	// loaded is false until the sensor's row was read from Postgres.
	loaded     bool
	registered bool
	// known is false until the sensor's first reading.
	known bool
	data  int8
	// partition and offset locate the reading that set data; changedAt is its
	// receive time in Unix nanoseconds.
	partition int32
	offset    int64
	changedAt int64
	// The batch that last asked Postgres for the sensor, saw it and changed it;
	// with them a batch needs no maps of its own. seenAt is the latest receive
	// time within batch seenIn, in Unix nanoseconds.
	missIn, seenIn, changedIn uint64
	seenAt                    int64
}

// chunkBits sizes the chunks sensorCache keeps its slots in: 4,096 slots.
const chunkBits = 12

// minIndexBits sizes a new sensorCache's index: 1,024 entries.
const minIndexBits = 10

// sensorCache is a partition worker's cache: slots, found through an index.
//
// Slots live in fixed-size chunks, so they never move (a batch refers to its
// sensors by slot number after one lookup each) and a growing cache never copies
// them. The index is an open-addressing hash table of slot numbers, at most half
// full, whose entries are eight bytes: a probe usually touches one cache line of
// it and then the slot, which the batch reads anyway. (A Go map keyed by
// sensorKey took three to four times as long per lookup, and the lookup is paid
// by every reading.) The hash is seeded per cache, so ids chosen to collide
// cannot slow it down.
type sensorCache struct {
	seed maphash.Seed
	// index entries hold the upper 32 bits of their key's hash and, below them,
	// the slot number plus one; zero is an empty entry. A key's probe starts at
	// the entry numbered by the top bits of its hash.
	index  []uint64
	bits   uint
	chunks [][]cached
	n      int32
}

func newSensorCache() sensorCache {
	return sensorCache{seed: maphash.MakeSeed(), index: make([]uint64, 1<<minIndexBits), bits: minIndexBits}
}

// slot returns the number of k's slot, adding an unloaded one if k is new.
func (c *sensorCache) slot(k sensorKey) int32 {
	h := uint32(maphash.Bytes(c.seed, k[:]) >> 32)
	i := c.probe(h, k)
	if e := c.index[i]; e != 0 {
		return int32(uint32(e)) - 1
	}
	if int(c.n+1)*2 > len(c.index) {
		c.grow()
		i = c.probe(h, k)
	}
	s := c.n
	c.n++
	if int(s>>chunkBits) == len(c.chunks) {
		c.chunks = append(c.chunks, make([]cached, 1<<chunkBits))
	}
	*c.at(s) = cached{key: k}
	c.index[i] = uint64(h)<<32 | uint64(uint32(s+1))
	return s
}

// probe returns the index entry that holds k (hash h) or the empty one where it
// belongs.
func (c *sensorCache) probe(h uint32, k sensorKey) int {
	mask := len(c.index) - 1
	i := int(h >> (32 - c.bits))
	for {
		e := c.index[i]
		if e == 0 || uint32(e>>32) == h && c.at(int32(uint32(e))-1).key == k {
			return i
		}
		i = (i + 1) & mask
	}
}

// grow doubles the index. Entries carry their hash, so no key is hashed again.
func (c *sensorCache) grow() {
	old := c.index
	c.bits++
	c.index = make([]uint64, 1<<c.bits)
	mask := len(c.index) - 1
	for _, e := range old {
		if e == 0 {
			continue
		}
		i := int(uint32(e>>32) >> (32 - c.bits))
		for c.index[i] != 0 {
			i = (i + 1) & mask
		}
		c.index[i] = e
	}
}

// at returns slot i.
func (c *sensorCache) at(i int32) *cached {
	return &c.chunks[i>>chunkBits][i&(1<<chunkBits-1)]
}

func (c *sensorCache) len() int { return int(c.n) }

// reset empties the cache, keeping its memory for reuse.
func (c *sensorCache) reset() {
	clear(c.index)
	c.n = 0
}

// worker processes one partition's batches in order.
type worker struct {
	c         *Consumer
	partition int32
	batches   chan []*kgo.Record
	quit      chan struct{}
	done      chan struct{}
	// Everything below is only touched by the worker's goroutine.
	cache sensorCache
	// batch numbers attempts at batches, for the stamps in cached.
	batch uint64
	// Scratch space every batch reuses.
	readings []valid
	misses   []int32
	changed  []int32
	undo     []undoEntry
	seen     []int32
}

func newWorker(c *Consumer, partition int32) *worker {
	return &worker{
		c:         c,
		partition: partition,
		batches:   make(chan []*kgo.Record, 2),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
		cache:     newSensorCache(),
	}
}

func (w *worker) run() {
	defer close(w.done)
	for {
		select {
		case <-w.quit:
			return
		case recs := <-w.batches:
			select {
			case <-w.quit:
				return // not started: the partition's next owner consumes it
			default:
			}
			if !w.processWithRetry(recs) {
				return
			}
		}
	}
}

// processWithRetry applies a batch, retrying with back-off until it succeeds
// (true) or the worker is stopped (false, nothing marked: the batch is consumed
// again by whoever owns the partition next).
func (w *worker) processWithRetry(recs []*kgo.Record) bool {
	c := w.c
	backoff := c.cfg.MinBackoff
	// Events Sightings returned in a failed attempt: asking again may not return
	// them, so they are carried into the next attempt.
	var carried []event.Event
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(c.base, c.cfg.BatchTimeout)
		err := w.process(ctx, recs, &carried)
		cancel()
		if err == nil {
			return true
		}
		c.metrics.batchErrors.Inc()
		c.logger.Error("batch failed; retrying", "partition", w.partition,
			"first_offset", recs[0].Offset, "records", len(recs), "attempt", attempt, "retry_in", backoff, "err", err)
		timer := time.NewTimer(backoff)
		select {
		case <-w.quit:
			timer.Stop()
			return false
		case <-timer.C:
		}
		backoff = min(2*backoff, c.cfg.MaxBackoff)
	}
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

// process applies one batch: reject, compare, produce events and DLQ records,
// store the new states, then mark the batch for commit. Each step is one round trip
// per batch, not per record, and a record costs one cache lookup and no
// allocation unless it is rejected or changes its sensor's state.
//
// The comparison updates the cache in place; if a later step fails, the slots it
// changed are put back, so the retry finds the same changes again.
func (w *worker) process(ctx context.Context, recs []*kgo.Record, carried *[]event.Event) (err error) {
	c := w.c
	start := time.Now()
	w.batch++
	batch := w.batch
	var (
		dlq      []*kgo.Record
		rejected map[string]int
	)
	w.readings, w.misses = w.readings[:0], w.misses[:0]
	for _, r := range recs {
		raw, err := reading.ParseKeyed(r.Key, r.Value)
		if err != nil {
			var rej *reading.RejectError
			if !errors.As(err, &rej) {
				return fmt.Errorf("parsing record %d: %w", r.Offset, err)
			}
			if rejected == nil {
				rejected = map[string]int{}
			}
			rejected[rej.Reason]++
			dlq = append(dlq, c.dlqRecord(r, rej))
			continue
		}
		id, data := raw.ID, raw.Data
		slot := w.cache.slot(keyOf(id))
		if s := w.cache.at(slot); !s.loaded && s.missIn != batch {
			s.missIn = batch
			w.misses = append(w.misses, slot)
		}
		w.readings = append(w.readings, valid{rec: r, slot: slot, data: int8(data)})
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
	var (
		events   []event.Event
		unknowns int
		track    = c.sightings != nil
	)
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
		e := event.Event{
			ID:       event.StateChangedID(id, w.partition, offset),
			Type:     event.StateChanged,
			SensorID: id,
			Data:     &data,
			At:       at,
		}
		if s.known {
			previous := int(s.data)
			e.Previous = &previous
		}
		events = append(events, e)
		s.known, s.data, s.changedAt, s.partition, s.offset = true, v.data, at.UnixNano(), w.partition, offset
	}

	if track && len(w.seen) > 0 {
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
		if err := c.client.ProduceSync(ctx, out...).FirstErr(); err != nil {
			return fmt.Errorf("producing %d events and %d rejects: %w", len(out)-len(dlq), len(dlq), err)
		}
	}

	if len(w.changed) > 0 {
		changes := make([]storage.StateChange, len(w.changed))
		for i, slot := range w.changed {
			s := w.cache.at(slot)
			changes[i] = storage.StateChange{SensorID: s.key.String(), Data: int(s.data),
				ChangedAt: time.Unix(0, s.changedAt), Partition: s.partition, Offset: s.offset}
		}
		if err := c.states.ApplyStateChanges(ctx, changes); err != nil {
			return fmt.Errorf("storing states: %w", err)
		}
	}
	if w.cache.len() > c.cfg.CacheSize {
		w.cache.reset()
	}
	c.client.MarkCommitRecords(recs[len(recs)-1])

	for reason, n := range rejected {
		c.metrics.rejected.WithLabelValues(reason).Add(float64(n))
	}
	c.metrics.changed.Add(float64(len(events)))
	c.metrics.unknown.Add(float64(unknowns))
	c.metrics.batchSize.Observe(float64(len(recs)))
	c.metrics.batchDuration.Observe(time.Since(start).Seconds())
	// Last, so that whoever sees a batch consumed also sees its other counts.
	c.metrics.consumed.Add(float64(len(recs)))
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
		dup := false
		for _, have := range a {
			if have.ID == e.ID {
				dup = true
				break
			}
		}
		if !dup {
			a = append(a, e)
		}
	}
	return a
}
