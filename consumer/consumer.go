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
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/stream"
)

// StateStore is where sensor state lives (PostgresStore).
type StateStore interface {
	// LookupSensors returns, for every id in order, whether it is registered and
	// its state.
	LookupSensors(ctx context.Context, ids []string) ([]SensorLookup, error)
	// ApplyStateChanges stores changes, ignoring any older than the stored state.
	ApplyStateChanges(ctx context.Context, changes []StateChange) error
}

// Sightings is told about every valid reading of a registered sensor, for
// heartbeat bookkeeping.
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
	// DefaultUnregisteredTopK is how many unregistered ids a process's hourly
	// summary holds.
	DefaultUnregisteredTopK          = 2000
	DefaultUnregisteredFlushInterval = 5 * time.Second
	// DefaultDLQMaxBytes keeps a DLQ record under both franz-go's default batch
	// limit (1,000,012 bytes) and Kafka's default max.message.bytes (1,048,588).
	DefaultDLQMaxBytes = 1_000_000
)

// Deps are what the state consumer works with.
type Deps struct {
	// States is where sensor state lives. Required.
	States StateStore
	// Sightings is told about the registered sensors seen. Optional.
	Sightings Sightings
	// Unregistered keeps the summaries of unregistered ids seen. Optional:
	// without it, unregistered readings are only counted.
	Unregistered UnregisteredStore
}

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
	// Run's context is cancelled, and a revoked partition's last batch. Defaults
	// to DefaultShutdownTimeout (30 s).
	ShutdownTimeout time.Duration
	// MinBackoff is the first wait before retrying a failed batch; it doubles up to
	// MaxBackoff. Defaults to DefaultMinBackoff (100 ms).
	MinBackoff time.Duration
	// MaxBackoff caps the wait between retries. Defaults to DefaultMaxBackoff (10 s).
	MaxBackoff time.Duration
	// CacheSize bounds the sensors whose state a partition worker caches; past it
	// the cache starts over from Postgres. Defaults to DefaultCacheSize (1,000,000).
	CacheSize int
	// UnregisteredTopK is how many unregistered ids the process's hourly summary
	// holds (see summary). Defaults to DefaultUnregisteredTopK (2,000).
	UnregisteredTopK int
	// UnregisteredFlushInterval is how often the summary is stored. Defaults to
	// DefaultUnregisteredFlushInterval (5 s).
	UnregisteredFlushInterval time.Duration
	// Process names this process in the summaries. Defaults to the host name
	// and a random suffix, new at every start.
	Process string
	// DLQMaxBytes bounds a DLQ record: a rejected record's value (then its key)
	// is cut to fit, and its size before is kept in the original-size header, so
	// that a record at the broker's size limit cannot wedge its partition.
	// Defaults to DefaultDLQMaxBytes (1,000,000).
	DLQMaxBytes int
	// FlapChanges and FlapWindow: a sensor with more than FlapChanges changes
	// within FlapWindow is unstable (one sensor_unstable; its state_changed
	// events are held) until it has been quiet for FlapWindow (one
	// sensor_stable). Default to DefaultFlapChanges (6) and DefaultFlapWindow
	// (1m).
	FlapChanges int
	FlapWindow  time.Duration
	// Now is the clock that says which hour a sighting of an unregistered id
	// falls in and which summaries have expired. Defaults to time.Now.
	Now func() time.Time
}

// Defaults of the flapping judgement.
const (
	DefaultFlapChanges = 6
	DefaultFlapWindow  = time.Minute
)

// WithDefaults returns the config with every unset field set to its default.
func (c Config) WithDefaults() Config {
	c.Stream = c.Stream.WithDefaults()
	if c.Now == nil {
		c.Now = time.Now
	}
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
	c.UnregisteredTopK = cmp.Or(c.UnregisteredTopK, DefaultUnregisteredTopK)
	c.UnregisteredFlushInterval = cmp.Or(c.UnregisteredFlushInterval, DefaultUnregisteredFlushInterval)
	c.DLQMaxBytes = cmp.Or(c.DLQMaxBytes, DefaultDLQMaxBytes)
	c.FlapChanges = cmp.Or(c.FlapChanges, DefaultFlapChanges)
	c.FlapWindow = cmp.Or(c.FlapWindow, DefaultFlapWindow)
	if c.Process == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.Process = cmp.Or(host, "consumer") + "-" + hex.EncodeToString(b)
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
	case c.UnregisteredTopK < 1:
		return fmt.Errorf("consumer config: UnregisteredTopK: %d, want at least 1", c.UnregisteredTopK)
	case c.UnregisteredFlushInterval <= 0:
		return fmt.Errorf("consumer config: UnregisteredFlushInterval: %v, want more than 0", c.UnregisteredFlushInterval)
	case c.DLQMaxBytes < minDLQMaxBytes:
		return fmt.Errorf("consumer config: DLQMaxBytes: %d, want at least %d", c.DLQMaxBytes, minDLQMaxBytes)
	}
	return nil
}

// Consumer is the state consumer. Create it with New and start it with Run.
type Consumer struct {
	cfg          Config
	states       StateStore
	writer       *stateWriter
	sightings    Sightings
	unregistered UnregisteredStore
	summary      *summary
	logger       *slog.Logger
	metrics      *stateMetrics
	group        *stream.Group
}

// New returns a state consumer. Its metrics (the Kafka client's included) are
// registered with reg; a nil logger logs nothing.
func New(cfg Config, deps Deps, reg prometheus.Registerer, logger *slog.Logger) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.States == nil {
		return nil, errors.New("consumer: nil StateStore")
	}
	m, err := newStateMetrics(reg)
	if err != nil {
		return nil, err
	}
	c := &Consumer{
		cfg:          cfg,
		states:       deps.States,
		sightings:    deps.Sightings,
		unregistered: deps.Unregistered,
		summary:      newSummary(cfg.UnregisteredTopK),
		logger:       logger.With("component", "consumer"),
		metrics:      m,
	}
	c.writer = newStateWriter(c)
	c.group, err = stream.NewGroup(stream.GroupConfig{
		Stream:         cfg.Stream,
		Group:          cfg.Group,
		Topics:         []string{cfg.Stream.ReadingsTopic()},
		MaxPollRecords: cfg.MaxPollRecords,
		DrainTimeout:   cfg.ShutdownTimeout,
		ClientName:     "consumer",
	}, c, reg, c.logger)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	return c, nil
}

// Run consumes until ctx is cancelled, then finishes the batches in flight
// (their states stored on a context that is not cancelled, within
// ShutdownTimeout), commits their offsets and leaves the group, returning nil.
// It returns an error when Kafka cannot be reached at start. Run may be called
// once.
func (c *Consumer) Run(ctx context.Context) error {
	// The state writer outlives the group: the group's shutdown waits for the
	// batches it handed over.
	writerCtx, stopWriter := context.WithCancel(context.WithoutCancel(ctx))
	var writer sync.WaitGroup
	writer.Go(func() { c.writer.run(writerCtx) })
	defer writer.Wait()
	defer stopWriter()
	if c.unregistered == nil {
		return c.group.Run(ctx)
	}
	flushCtx, stopFlush := context.WithCancel(ctx)
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		c.flushUnregisteredLoop(flushCtx)
	}()
	err := c.group.Run(ctx)
	stopFlush()
	<-flushed
	// The workers are done: store what they counted last.
	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ShutdownTimeout)
	defer cancel()
	c.flushUnregistered(final)
	return err
}

// Assigned starts the worker of a partition the group assigned (stream.Handler).
func (c *Consumer) Assigned(client *kgo.Client, _ string, partition int32) stream.PartitionHandler {
	return newWorker(c, client, partition)
}
