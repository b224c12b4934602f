// Package history is the history writer: it copies valid readings and every
// event into ClickHouse, in large batches, in a consumer group of its own, so it
// scales and fails apart from the state consumer.
package history

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/internal/metrics"
	"github.com/lockstream/lockstream/reading"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/stream"
)

// Store is where history goes (ClickHouseStore). Inserting the same rows
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
	group   *stream.Group
	// The topic names, built once: every record is matched against them.
	readingsTopic, eventsTopic string
	// in takes the partition workers' decoded batches to the collector.
	in chan *part
}

// New returns a history writer. Its metrics (the Kafka client's included) are
// registered with reg; a nil logger logs nothing.
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
	h := &Writer{cfg: cfg, store: store, logger: logger.With("component", "history"), metrics: m,
		readingsTopic: cfg.Stream.ReadingsTopic(), eventsTopic: cfg.Stream.EventsTopic(), in: make(chan *part)}
	h.group, err = stream.NewGroup(stream.GroupConfig{
		Stream: cfg.Stream, Group: cfg.Group, Topics: []string{h.readingsTopic, h.eventsTopic},
		MaxPollRecords: min(cfg.FlushRows, maxPollRecords), DrainTimeout: cfg.ShutdownTimeout, ClientName: "history",
	}, h, reg, h.logger)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return h, nil
}

// maxPollRecords bounds a poll of the history writer: a poll round is handed
// out before a rebalance may go on.
const maxPollRecords = 100_000

// Run writes history until ctx is cancelled, then writes what it holds and commits
// it (within ShutdownTimeout), returning nil. It returns an error when Kafka cannot
// be reached at start. Run may be called once.
//
// Each partition's worker decodes its batches and hands them to a collector,
// which gathers every partition's rows into one buffer; a flusher stores full
// buffers (FlushRows, or FlushInterval after the first record) while the next
// fills: decoding and ClickHouse's work overlap, and ClickHouse gets few large
// inserts. A batch is marked for commit once its buffer is stored. While
// ClickHouse fails, the flusher retries with back-off and, once the next buffer
// is full too, the workers wait and polling stops, so memory stays bounded (two
// buffers) and no offset moves past an unstored record. After a rebalance the
// new owner of a partition may store again what was buffered but not yet
// committed here; the tables collapse such copies.
func (h *Writer) Run(ctx context.Context) error {
	free := make(chan *historyBuffer, 2)
	free <- newHistoryBuffer()
	free <- newHistoryBuffer()
	full := make(chan *historyBuffer)
	stop := make(chan struct{})
	collected, flushed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(collected)
		h.collect(ctx, stop, free, full)
	}()
	go func() {
		defer close(flushed)
		for buf := range full {
			h.flush(ctx, buf)
			free <- buf
		}
	}()
	err := h.group.Run(ctx)
	close(stop)
	<-collected
	<-flushed
	h.logger.Info("history writer stopped")
	return err
}

// Assigned returns the handler of a partition the group assigned
// (stream.Handler).
func (h *Writer) Assigned(_ *kgo.Client, topic string, _ int32) stream.PartitionHandler {
	return partitionHandler{h: h, topic: topic}
}

// partitionHandler decodes one partition's batches for the collector.
type partitionHandler struct {
	h     *Writer
	topic string
}

// part is one batch's rows on their way to a buffer; done is closed once they
// are stored.
type part struct {
	records  int
	readings []storage.HistoryReading
	events   []storage.HistoryEvent
	done     chan struct{}
}

// Handle decodes a batch and hands it to the collector; the batch is durable
// when its buffer is stored.
func (p partitionHandler) Handle(ctx context.Context, b stream.Batch) (stream.Pending, error) {
	pt := &part{records: len(b.Records), done: make(chan struct{})}
	switch p.topic {
	case p.h.readingsTopic:
		pt.readings = make([]storage.HistoryReading, 0, len(b.Records))
		for _, r := range b.Records {
			pt.readings = p.h.appendReading(pt.readings, r)
		}
	case p.h.eventsTopic:
		pt.events = make([]storage.HistoryEvent, 0, len(b.Records))
		for _, r := range b.Records {
			pt.events = p.h.appendEvent(pt.events, r)
		}
	}
	select {
	case p.h.in <- pt:
		return pt.done, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close does nothing: the rows of a partition already handed over are stored
// with their buffer.
func (partitionHandler) Close() {}

// collect gathers the workers' rows into buffers and hands each to the flusher
// when it holds FlushRows records or its first record is FlushInterval old.
// Once ctx is cancelled every record is handed over at once, so the final
// flush does not wait; collect returns when stop is closed (no worker is left).
func (h *Writer) collect(ctx context.Context, stop <-chan struct{}, free <-chan *historyBuffer, full chan<- *historyBuffer) {
	defer close(full)
	buf := <-free
	interval := h.cfg.FlushInterval
	timer := time.NewTimer(interval)
	timer.Stop()
	defer timer.Stop()
	done := ctx.Done()
	for {
		handOver := false
		select {
		case pt := <-h.in:
			if buf.records == 0 {
				timer.Reset(interval)
			}
			buf.add(pt)
			h.metrics.buffered.Add(float64(pt.records))
			handOver = buf.records >= h.cfg.FlushRows || interval == 0
		case <-timer.C:
			handOver = buf.records > 0
		case <-done:
			done, interval = nil, 0
			handOver = buf.records > 0
		case <-stop:
			if buf.records > 0 {
				full <- buf
			}
			return
		}
		if handOver {
			timer.Stop()
			full <- buf
			buf = <-free
		}
	}
}

func (h *Writer) appendReading(rows []storage.HistoryReading, r *kgo.Record) []storage.HistoryReading {
	raw, err := reading.ParseKeyed(r.Key, r.Value)
	if err != nil {
		h.metrics.skipped.WithLabelValues(r.Topic).Inc() // the state consumer sent it to the DLQ
		return rows
	}
	return append(rows, storage.HistoryReading{
		SensorID: string(raw.ID), Data: raw.Data, TS: raw.TS,
		ReceivedAt: r.Timestamp, Partition: r.Partition, Offset: r.Offset,
	})
}

func (h *Writer) appendEvent(rows []storage.HistoryEvent, r *kgo.Record) []storage.HistoryEvent {
	e, err := event.Decode(r.Value)
	if err != nil {
		h.metrics.skipped.WithLabelValues(r.Topic).Inc()
		h.logger.Error("undecodable event skipped", "partition", r.Partition, "offset", r.Offset, "err", err)
		return rows
	}
	return append(rows, storage.HistoryEvent{
		ID: e.ID, Type: string(e.Type), SensorID: e.SensorID, Data: e.Data, Previous: e.Previous, At: e.At,
	})
}

// flush writes the buffer, retrying with back-off until it is stored, then
// tells its batches' workers and empties it. Once ctx is cancelled it retries
// for ShutdownTimeout more at most, then gives up: the records were not
// committed and are consumed again after a restart.
func (h *Writer) flush(ctx context.Context, buf *historyBuffer) {
	defer func() {
		h.metrics.buffered.Sub(float64(buf.records))
		buf.reset()
	}()
	backoff := h.cfg.MinBackoff
	var giveUp <-chan time.Time
	for attempt := 1; ; attempt++ {
		err := h.insert(ctx, buf)
		if err == nil {
			for _, done := range buf.waiters {
				close(done)
			}
			return
		}
		h.metrics.failures.Inc()
		h.logger.Error("history flush failed; retrying", "attempt", attempt, "retry_in", backoff,
			"readings", len(buf.readings), "events", len(buf.events), "err", err)
		if giveUp == nil && ctx.Err() != nil {
			t := time.NewTimer(h.cfg.ShutdownTimeout)
			defer t.Stop()
			giveUp = t.C
		}
		timer := time.NewTimer(backoff)
		select {
		case <-giveUp:
			timer.Stop()
			h.logger.Warn("final history flush failed; the records will be written after restart",
				"records", buf.records, "err", err)
			return
		case <-timer.C:
		}
		backoff = min(2*backoff, h.cfg.MaxBackoff)
	}
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

// historyBuffer holds the rows of records polled but not yet stored.
type historyBuffer struct {
	records  int
	readings []storage.HistoryReading
	events   []storage.HistoryEvent
	// waiters are the done channels of the buffer's parts.
	waiters []chan struct{}
	// readingsDone and eventsDone say which half of a partly failed flush is stored.
	readingsDone, eventsDone bool
}

func newHistoryBuffer() *historyBuffer { return &historyBuffer{} }

func (b *historyBuffer) add(pt *part) {
	b.records += pt.records
	b.readings = append(b.readings, pt.readings...)
	b.events = append(b.events, pt.events...)
	b.waiters = append(b.waiters, pt.done)
}

func (b *historyBuffer) reset() {
	b.records = 0
	b.readings = b.readings[:0]
	b.events = b.events[:0]
	b.waiters = b.waiters[:0]
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
