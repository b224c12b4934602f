// Package history is the history writer: it copies valid readings and every
// event into ClickHouse, in large batches, in a consumer group of its own, so it
// scales and fails apart from the state consumer.
package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/internal/metrics"
	"github.com/lockstream/lockstream/reading"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/stream"
)

// Store is where history goes (storage.ClickHouse). Inserting the same rows
// twice must leave one copy after deduplication: the writer is at-least-once.
type Store interface {
	InsertReadings(ctx context.Context, rows []storage.HistoryReading) error
	InsertEvents(ctx context.Context, rows []storage.HistoryEvent) error
}

// Defaults of Config.
const (
	DefaultGroup           = "lockstream-history"
	DefaultFlushRows       = 200_000
	DefaultFlushInterval   = time.Second
	DefaultInsertTimeout   = 30 * time.Second
	DefaultMinBackoff      = 100 * time.Millisecond
	DefaultMaxBackoff      = 10 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
)

// Config configures the history writer.
type Config struct {
	// Stream says where Kafka is and names the topics. Brokers is required.
	Stream stream.Config
	// Group is the history writer's consumer group, separate from the state
	// consumer's so each scales and fails on its own. Defaults to
	// DefaultGroup ("lockstream-history").
	Group string
	// FlushRows is how many records are buffered before they are written. The
	// writer holds at most two such batches (one being written, one filling),
	// also while ClickHouse is down. Large inserts are what ClickHouse wants:
	// each makes a part to merge, and 200,000 rows at a time cost its server
	// about 40 % less CPU per row than 50,000. Under light load FlushInterval
	// triggers first. Defaults to DefaultFlushRows (200,000).
	FlushRows int
	// FlushInterval is the longest a record waits in the buffer, so history is
	// visible soon after the reading. Defaults to DefaultFlushInterval (1 s).
	FlushInterval time.Duration
	// InsertTimeout bounds one insert attempt. Defaults to DefaultInsertTimeout (30 s).
	InsertTimeout time.Duration
	// MinBackoff is the first wait before retrying a failed flush; it doubles up to
	// MaxBackoff. Defaults to DefaultMinBackoff (100 ms).
	MinBackoff time.Duration
	// MaxBackoff caps the wait between flush retries. Defaults to DefaultMaxBackoff
	// (10 s).
	MaxBackoff time.Duration
	// ShutdownTimeout bounds the final flush once Run's context is cancelled.
	// Defaults to DefaultShutdownTimeout (30 s).
	ShutdownTimeout time.Duration
}

// WithDefaults returns the config with every unset field set to its default.
func (c Config) WithDefaults() Config {
	c.Stream = c.Stream.WithDefaults()
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.FlushRows == 0 {
		c.FlushRows = DefaultFlushRows
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.InsertTimeout == 0 {
		c.InsertTimeout = DefaultInsertTimeout
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	return c
}

// Validate reports the first field that cannot work.
func (c Config) Validate() error {
	if err := c.Stream.Validate(); err != nil {
		return fmt.Errorf("history config: Stream: %w", err)
	}
	switch {
	case c.FlushRows < 1:
		return fmt.Errorf("history config: FlushRows: %d, want at least 1", c.FlushRows)
	case c.FlushInterval <= 0:
		return fmt.Errorf("history config: FlushInterval: %v, want more than 0", c.FlushInterval)
	case c.InsertTimeout <= 0:
		return fmt.Errorf("history config: InsertTimeout: %v, want more than 0", c.InsertTimeout)
	case c.MinBackoff <= 0:
		return fmt.Errorf("history config: MinBackoff: %v, want more than 0", c.MinBackoff)
	case c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("history config: MaxBackoff: %v is less than MinBackoff %v", c.MaxBackoff, c.MinBackoff)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("history config: ShutdownTimeout: %v, want more than 0", c.ShutdownTimeout)
	}
	return nil
}

// Writer is the history writer: valid readings and every event into ClickHouse,
// in batches, committing offsets only after the batch is stored. Create it with
// New and start it with Run.
type Writer struct {
	cfg     Config
	store   Store
	logger  *slog.Logger
	metrics *historyMetrics
	started atomic.Bool
	// The topic names, built once: every record is matched against them.
	readingsTopic, eventsTopic string
}

// New returns a history writer. Its metrics are registered with reg; a nil
// logger logs nothing.
func New(cfg Config, store Store, reg prometheus.Registerer, logger *slog.Logger) (*Writer, error) {
	cfg = cfg.WithDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, errors.New("history: nil Store")
	}
	m, err := newHistoryMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Writer{cfg: cfg, store: store, logger: logger.With("component", "history"), metrics: m,
		readingsTopic: cfg.Stream.ReadingsTopic(), eventsTopic: cfg.Stream.EventsTopic()}, nil
}

// Run writes history until ctx is cancelled, then writes what it holds and commits
// it (within ShutdownTimeout), returning nil. It returns an error when Kafka cannot
// be reached at start. Run may be called once.
//
// Records are buffered and written in batches of up to FlushRows, by a flusher
// goroutine, while the next batch is polled and decoded: decoding and
// ClickHouse's work overlap. Batches are stored and committed one after the
// other, in order. While ClickHouse fails, the flusher retries its batch with
// back-off and, once the next batch is full too, Run polls nothing new, so
// memory stays bounded (two batches) and no offset moves past an unstored
// record. After a rebalance the new owner of a partition may store again what
// was buffered but not yet committed here; the tables collapse such copies.
func (h *Writer) Run(ctx context.Context) error {
	if !h.started.CompareAndSwap(false, true) {
		return errors.New("history: Run called twice")
	}
	client, err := kgo.NewClient(append(stream.ClientOpts(h.cfg.Stream),
		stream.WithLogger(h.logger),
		kgo.ConsumerGroup(h.cfg.Group),
		kgo.ConsumeTopics(h.readingsTopic, h.eventsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	)...)
	if err != nil {
		return fmt.Errorf("history: creating kafka client: %w", err)
	}
	defer client.Close()
	if err := client.Ping(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("history: reaching kafka: %w", err)
	}
	h.logger.Info("history writer started", "group", h.cfg.Group)

	// Two buffers take turns: Run fills one while the flusher stores the other.
	free := make(chan *historyBuffer, 2)
	free <- newHistoryBuffer()
	free <- newHistoryBuffer()
	full := make(chan *historyBuffer)
	// left holds, in order, the batches the flusher could not store before ctx
	// was cancelled; Run reads it once the flusher is done.
	var left []*historyBuffer
	flusherDone := make(chan struct{})
	go func() {
		defer close(flusherDone)
		for buf := range full {
			if len(left) > 0 {
				left = append(left, buf) // keep the order: nothing overtakes a failed batch
				continue
			}
			if err := h.flush(ctx, client, buf); err != nil {
				left = append(left, buf) // cancelled while retrying
				continue
			}
			free <- buf
		}
	}()

	buf := <-free
	var deadline time.Time // when the oldest buffered record must be written
poll:
	for {
		pollCtx, cancel := ctx, context.CancelFunc(func() {})
		if buf.records > 0 {
			pollCtx, cancel = context.WithDeadline(ctx, deadline)
		}
		fetches := client.PollRecords(pollCtx, h.cfg.FlushRows-buf.records)
		cancel()
		if fetches.IsClientClosed() || ctx.Err() != nil {
			break
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				h.logger.Error("fetching", "topic", topic, "partition", partition, "err", err)
			}
		})
		before := buf.records
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if buf.records == 0 && len(p.Records) > 0 {
				deadline = time.Now().Add(h.cfg.FlushInterval)
			}
			h.add(buf, p)
		})
		h.metrics.buffered.Add(float64(buf.records - before))
		if buf.records >= h.cfg.FlushRows || (buf.records > 0 && !time.Now().Before(deadline)) {
			select {
			case full <- buf:
			case <-ctx.Done():
				break poll // buf is written by the final flush below
			}
			select {
			case buf = <-free:
			case <-ctx.Done():
				buf = nil
				break poll
			}
		}
	}

	close(full)
	<-flusherDone
	if buf != nil && buf.records > 0 {
		left = append(left, buf)
	}
	if len(left) > 0 {
		final, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.ShutdownTimeout)
		defer cancel()
		for _, b := range left {
			if err := h.flush(final, client, b); err != nil {
				// Nothing is lost: the records were not committed and are read
				// again; nothing after them is committed either.
				h.logger.Warn("final history flush failed; the records will be written after restart",
					"records", b.records, "err", err)
				break
			}
		}
	}
	h.logger.Info("history writer stopped")
	return nil
}

// add buffers one partition's polled records as the rows they become.
func (h *Writer) add(buf *historyBuffer, p kgo.FetchTopicPartition) {
	if len(p.Records) == 0 {
		return
	}
	buf.records += len(p.Records)
	buf.last[topicPartition{p.Topic, p.Partition}] = p.Records[len(p.Records)-1]
	switch p.Topic {
	case h.readingsTopic:
		for _, r := range p.Records {
			h.addReading(buf, r)
		}
	case h.eventsTopic:
		for _, r := range p.Records {
			h.addEvent(buf, r)
		}
	}
}

func (h *Writer) addReading(buf *historyBuffer, r *kgo.Record) {
	raw, err := reading.ParseKeyed(r.Key, r.Value)
	if err != nil {
		h.metrics.skipped.WithLabelValues(r.Topic).Inc() // the state consumer sent it to the DLQ
		return
	}
	buf.readings = append(buf.readings, storage.HistoryReading{
		SensorID: string(raw.ID), Data: raw.Data, TS: raw.TS,
		ReceivedAt: r.Timestamp, Partition: r.Partition, Offset: r.Offset,
	})
}

func (h *Writer) addEvent(buf *historyBuffer, r *kgo.Record) {
	e, err := event.Decode(r.Value)
	if err != nil {
		h.metrics.skipped.WithLabelValues(r.Topic).Inc()
		h.logger.Error("undecodable event skipped", "partition", r.Partition, "offset", r.Offset, "err", err)
		return
	}
	buf.events = append(buf.events, storage.HistoryEvent{
		ID: e.ID, Type: string(e.Type), SensorID: e.SensorID, Data: e.Data, Previous: e.Previous, At: e.At,
	})
}

// flush writes the buffer, retrying with back-off until it is stored or ctx ends,
// then commits the buffered records' offsets and empties the buffer.
func (h *Writer) flush(ctx context.Context, client *kgo.Client, buf *historyBuffer) error {
	backoff := h.cfg.MinBackoff
	for attempt := 1; ; attempt++ {
		err := h.insert(ctx, buf)
		if err == nil {
			break
		}
		h.metrics.failures.Inc()
		h.logger.Error("history flush failed; retrying", "attempt", attempt, "retry_in", backoff,
			"readings", len(buf.readings), "events", len(buf.events), "err", err)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		backoff = min(2*backoff, h.cfg.MaxBackoff)
	}
	commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.InsertTimeout)
	defer cancel()
	if err := client.CommitRecords(commitCtx, buf.lastRecords()...); err != nil {
		// The rows are stored; an uncommitted offset only means they are written
		// again later, and the tables collapse the copies.
		h.logger.Warn("committing history offsets failed", "err", err)
	}
	h.metrics.buffered.Sub(float64(buf.records))
	buf.reset()
	return nil
}

// insert writes what of the buffer is not written yet. An insert in progress is
// not cancelled with ctx; it has its own deadline.
func (h *Writer) insert(ctx context.Context, buf *historyBuffer) error {
	base := context.WithoutCancel(ctx)
	if !buf.readingsDone {
		if err := h.timed(base, "readings", len(buf.readings), func(ctx context.Context) error {
			return h.store.InsertReadings(ctx, buf.readings)
		}); err != nil {
			return err
		}
		buf.readingsDone = true
	}
	if !buf.eventsDone {
		if err := h.timed(base, "events", len(buf.events), func(ctx context.Context) error {
			return h.store.InsertEvents(ctx, buf.events)
		}); err != nil {
			return err
		}
		buf.eventsDone = true
	}
	return nil
}

func (h *Writer) timed(ctx context.Context, table string, rows int, insert func(context.Context) error) error {
	if rows == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.InsertTimeout)
	defer cancel()
	start := time.Now()
	if err := insert(ctx); err != nil {
		return err
	}
	h.metrics.insertSeconds.WithLabelValues(table).Observe(time.Since(start).Seconds())
	h.metrics.rows.WithLabelValues(table).Add(float64(rows))
	return nil
}

type topicPartition struct {
	topic     string
	partition int32
}

// historyBuffer holds the rows of records polled but not yet stored.
type historyBuffer struct {
	records  int
	readings []storage.HistoryReading
	events   []storage.HistoryEvent
	// last is the newest record per partition: what to commit once stored.
	last map[topicPartition]*kgo.Record
	// readingsDone and eventsDone say which half of a partly failed flush is stored.
	readingsDone, eventsDone bool
}

func newHistoryBuffer() *historyBuffer {
	return &historyBuffer{last: map[topicPartition]*kgo.Record{}}
}

func (b *historyBuffer) lastRecords() []*kgo.Record {
	out := make([]*kgo.Record, 0, len(b.last))
	for _, r := range b.last {
		out = append(out, r)
	}
	return out
}

func (b *historyBuffer) reset() {
	b.records = 0
	b.readings = b.readings[:0]
	b.events = b.events[:0]
	clear(b.last)
	b.readingsDone, b.eventsDone = false, false
}

// historyMetrics are the history writer's metrics of DESIGN.md.
type historyMetrics struct {
	rows          *prometheus.CounterVec
	insertSeconds *prometheus.HistogramVec
	failures      prometheus.Counter
	skipped       *prometheus.CounterVec
	buffered      prometheus.Gauge
}

func newHistoryMetrics(reg prometheus.Registerer) (*historyMetrics, error) {
	m := &historyMetrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockstream_history_rows_written_total",
			Help: "Rows inserted into ClickHouse by the history writer, by table.",
		}, []string{"table"}),
		insertSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockstream_history_insert_duration_seconds",
			Help:    "Time of one ClickHouse insert of the history writer, by table.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"table"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_history_flush_failures_total",
			Help: "Failed attempts to flush history to ClickHouse; the flush is retried.",
		}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockstream_history_skipped_total",
			Help: "Records the history writer does not store: invalid readings (in the DLQ) and undecodable events.",
		}, []string{"topic"}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lockstream_history_buffered_records",
			Help: "Records polled by the history writer and not yet stored (bounded by the flush size).",
		}),
	}
	for _, table := range []string{"readings", "events"} {
		m.rows.WithLabelValues(table)
	}
	if err := metrics.RegisterAll(reg, m.rows, m.insertSeconds, m.failures, m.skipped, m.buffered); err != nil {
		return nil, fmt.Errorf("registering history metrics: %w", err)
	}
	return m, nil
}
