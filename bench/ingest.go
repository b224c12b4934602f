// Package bench measures lockstream's hot paths on a running system, for
// `lockstream bench`.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/stream"
)

// Defaults of IngestConfig.
const (
	DefaultIngestReadings   = 1_000_000
	DefaultIngestSensors    = 100_000
	DefaultIngestChangeRate = 0.01
	DefaultIngestTimeout    = 15 * time.Minute
)

// IngestConfig sizes the ingest benchmark.
type IngestConfig struct {
	// Stream says where Kafka is. Each run creates fresh topics under a prefix of
	// its own (TopicPrefix is overwritten), so earlier records do not count.
	Stream stream.Config
	// Readings is how many readings are produced and consumed. Defaults to
	// DefaultIngestReadings (1,000,000).
	Readings int
	// Sensors is how many sensors they come from, round-robin. Defaults to
	// DefaultIngestSensors (100,000).
	Sensors int
	// ChangeRate is the probability that a reading differs from its sensor's last
	// state. Defaults to DefaultIngestChangeRate (0.01).
	ChangeRate float64
	// ColdStart leaves sensor_state as it is (empty in a fresh database), so every
	// sensor's first reading is a change from unknown and the measured pass holds
	// Sensors more changes than ChangeRate says. Defaults to false: before the
	// full consumer runs, every sensor's state is stored as a previous pass would
	// have left it (sensor_state rows dated an hour before the run, from no
	// partition), so ChangeRate holds for every reading.
	ColdStart bool
	// History is where the history writer's phase stores rows (a
	// history.ClickHouseStore). Defaults to nil: the history writer is not measured.
	History history.Store
	// MaxPollRecords is the full consumer's consumer.Config.MaxPollRecords.
	// Defaults to 0, the consumer's own default.
	MaxPollRecords int
	// Timeout bounds the whole run. Defaults to DefaultIngestTimeout (15 minutes).
	Timeout time.Duration
	// Seed makes the readings repeatable. Defaults to 1.
	Seed uint64
}

// WithDefaults returns the config with every unset field set to its default.
func (c IngestConfig) WithDefaults() IngestConfig {
	c.Stream = c.Stream.WithDefaults()
	if c.Readings == 0 {
		c.Readings = DefaultIngestReadings
	}
	if c.Sensors == 0 {
		c.Sensors = DefaultIngestSensors
	}
	if c.ChangeRate == 0 {
		c.ChangeRate = DefaultIngestChangeRate
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultIngestTimeout
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return c
}

// Validate reports the first field that cannot work.
func (c IngestConfig) Validate() error {
	if err := c.Stream.Validate(); err != nil {
		return fmt.Errorf("ingest bench config: Stream: %w", err)
	}
	switch {
	case c.Readings < 1:
		return fmt.Errorf("ingest bench config: Readings: %d, want at least 1", c.Readings)
	case c.Sensors < 1:
		return fmt.Errorf("ingest bench config: Sensors: %d, want at least 1", c.Sensors)
	case c.ChangeRate < 0 || c.ChangeRate > 1:
		return fmt.Errorf("ingest bench config: ChangeRate: %v, want a probability", c.ChangeRate)
	case c.MaxPollRecords < 0:
		return fmt.Errorf("ingest bench config: MaxPollRecords: %d, want 0 (the default) or more", c.MaxPollRecords)
	case c.Timeout <= 0:
		return fmt.Errorf("ingest bench config: Timeout: %v, want more than 0", c.Timeout)
	}
	return nil
}

// IngestResult is what the ingest benchmark measured. Consume rates are readings
// per second, the history rate rows per second; the consume times include joining
// the topic (and, for the full consumer and the history writer, the consumer
// group).
type IngestResult struct {
	Readings        int     `json:"readings"`
	Sensors         int     `json:"sensors"`
	ChangeRate      float64 `json:"change_rate"`
	ColdStart       bool    `json:"cold_start"`
	ExpectedChanges int     `json:"expected_changes"`
	Changes         int     `json:"changes"`
	ProduceSeconds  float64 `json:"produce_seconds"`
	// SeedSeconds is the time taken to register every sensor and store its
	// previous state (registration only on a cold start). It is not part of any
	// rate.
	SeedSeconds float64 `json:"seed_seconds"`
	BareSeconds float64 `json:"bare_consume_seconds"`
	BareRate    float64 `json:"bare_consume_rate"`
	FullSeconds float64 `json:"full_consumer_seconds"`
	FullRate    float64 `json:"full_consumer_rate"`
	// FullBatches is how many batches the partition workers of the full
	// consumer processed.
	FullBatches int `json:"full_consumer_batches"`
	// Ratio is FullRate / BareRate.
	Ratio float64 `json:"ratio"`
	// HistoryRows is the rows the history writer stored: every reading and every
	// event. HistoryRows and the fields after it are zero when no history store
	// was given.
	HistoryRows    int     `json:"history_rows"`
	HistorySeconds float64 `json:"history_seconds"`
	HistoryRate    float64 `json:"history_rate"`
}

// Ingest produces cfg.Readings readings, then measures one after the other (a) a
// bare franz-go consume of them, (b) the full state consumer (decode, compare,
// events, Postgres upsert, commit) with states as its store and (c), when
// cfg.History is set, the history writer storing the readings and the
// consumer's events there. It writes the result to out as JSON.
func Ingest(ctx context.Context, cfg IngestConfig, states IngestStore, logger *slog.Logger, out io.Writer) (IngestResult, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return IngestResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	run, err := newIngestRun(ctx, cfg, states, logger)
	if err != nil {
		return IngestResult{}, err
	}
	defer run.close()
	for _, phase := range run.phases() {
		if err := phase.run(ctx); err != nil {
			return run.res, err
		}
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(run.res); err != nil {
		return run.res, fmt.Errorf("ingest bench: writing result: %w", err)
	}
	return run.res, nil
}

// IngestStore is where the full consumer keeps state (consumer.PostgresStore);
// the benchmark registers its sensors there first (registry.Store), since
// only registered sensors have a state.
type IngestStore interface {
	consumer.StateStore
	CreateSensors(ctx context.Context, ids []string, address string) error
}

// NewPostgresStore is the store the benchmarks run on: the consumer's
// statements and the registry's, on pg, and pg's own cost readings.
func NewPostgresStore(pg *storage.Postgres) PipelineStore {
	return postgresStores{consumer.NewPostgresStore(pg), registry.New(pg), pg}
}

// postgresStores is the consumer's store, the registry and the plumbing on
// one Postgres.
type postgresStores struct {
	*consumer.PostgresStore
	*registry.Store
	*storage.Postgres
}

// BenchSensorID returns the id of the benchmark's sensor i.
func BenchSensorID(i int) string {
	return "b" + strconv.FormatInt(int64(i), 36)
}

// ingestRun is one run of the ingest benchmark, in phases a profiler can wrap.
type ingestRun struct {
	cfg    IngestConfig
	states IngestStore
	logger *slog.Logger
	client *kgo.Client
	// initial is each sensor's state before the run's first reading.
	initial []int8
	// before is when the previous states were set: before any reading.
	before time.Time
	res    IngestResult
}

type ingestPhase struct {
	name string
	run  func(context.Context) error
}

func newIngestRun(ctx context.Context, cfg IngestConfig, states IngestStore, logger *slog.Logger) (*ingestRun, error) {
	if states == nil {
		return nil, errors.New("ingest bench: nil StateStore")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	cfg.Stream.TopicPrefix = "bench" + hex.EncodeToString(id) + "."
	client, err := kgo.NewClient(append(stream.ClientOpts(cfg.Stream), kgo.MaxBufferedRecords(100_000))...)
	if err != nil {
		return nil, fmt.Errorf("ingest bench: creating client: %w", err)
	}
	if err := stream.EnsureTopics(ctx, client, cfg.Stream); err != nil {
		client.Close()
		return nil, fmt.Errorf("ingest bench: %w", err)
	}
	return &ingestRun{
		cfg: cfg, states: states, logger: logger, client: client,
		res: IngestResult{Readings: cfg.Readings, Sensors: cfg.Sensors, ChangeRate: cfg.ChangeRate, ColdStart: cfg.ColdStart},
	}, nil
}

func (r *ingestRun) close() { r.client.Close() }

// phases lists the run's steps in order; the names are the ones the CPU profiles
// of the Go benchmark carry.
func (r *ingestRun) phases() []ingestPhase {
	out := []ingestPhase{
		{"produce", r.produce},
		{"seed", r.seed},
		{"bare", r.bare},
		{"full", r.full},
	}
	if r.cfg.History != nil {
		out = append(out, ingestPhase{"history", r.historyPhase})
	}
	return out
}

// produce produces the readings and counts how many are changes.
func (r *ingestRun) produce(ctx context.Context) error {
	cfg := r.cfg
	start := time.Now()
	r.before = start.Add(-time.Hour)
	rng := mrand.New(mrand.NewPCG(cfg.Seed, cfg.Seed))
	r.initial = make([]int8, cfg.Sensors)
	for i := range r.initial {
		r.initial[i] = int8(rng.IntN(2))
	}
	state := make([]int8, cfg.Sensors)
	copy(state, r.initial)
	first := make([]bool, cfg.Sensors)
	errc := make(chan error, 1)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			select {
			case errc <- err:
			default:
			}
		}
	}
	changes := 0
	topic := cfg.Stream.ReadingsTopic()
	for n := range cfg.Readings {
		i := n % cfg.Sensors
		data := state[i]
		switch {
		case cfg.ColdStart && !first[i]:
			changes++ // a change from unknown, whatever the data
		case rng.Float64() < cfg.ChangeRate:
			data = 1 - data
			changes++
		}
		first[i] = true
		state[i] = data
		id := BenchSensorID(i)
		value := fmt.Appendf(nil, `{"sensor_id":%q,"data":%d}`, id, data)
		r.client.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(id), Value: value}, promise)
	}
	if err := r.client.Flush(ctx); err != nil {
		return fmt.Errorf("ingest bench: flushing readings: %w", err)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("ingest bench: producing readings: %w", err)
	default:
	}
	r.res.ExpectedChanges = changes
	r.res.ProduceSeconds = time.Since(start).Seconds()
	return nil
}

// seedChunk is how many previous states one statement stores.
const seedChunk = 20_000

// seed registers every sensor and stores its state as a previous pass would
// have left it, unless the run is a cold start. The rows come from no partition
// (-1) and are dated before every reading, so any reading of the run is newer.
func (r *ingestRun) seed(ctx context.Context) error {
	start := time.Now()
	ids := make([]string, 0, seedChunk)
	for i := range r.cfg.Sensors {
		ids = append(ids, BenchSensorID(i))
		if len(ids) == seedChunk || i == r.cfg.Sensors-1 {
			if err := r.states.CreateSensors(ctx, ids, "bench"); err != nil {
				return fmt.Errorf("ingest bench: registering sensors: %w", err)
			}
			ids = ids[:0]
		}
	}
	if r.cfg.ColdStart {
		r.res.SeedSeconds = time.Since(start).Seconds()
		return nil
	}
	changes := make([]consumer.StateChange, 0, seedChunk)
	for i := range r.initial {
		changes = append(changes, consumer.StateChange{SensorID: BenchSensorID(i), Data: int(r.initial[i]),
			ChangedAt: r.before, Partition: -1, Offset: -1})
		if len(changes) == seedChunk || i == len(r.initial)-1 {
			if err := r.states.ApplyStateChanges(ctx, changes); err != nil {
				return fmt.Errorf("ingest bench: seeding previous states: %w", err)
			}
			changes = changes[:0]
		}
	}
	r.res.SeedSeconds = time.Since(start).Seconds()
	return nil
}

// bare times a plain franz-go consumer reading every reading.
func (r *ingestRun) bare(ctx context.Context) error {
	_, elapsed, err := consumeBare(ctx, r.cfg.Stream, r.cfg.Readings)
	if err != nil {
		return fmt.Errorf("ingest bench: %w", err)
	}
	r.res.BareSeconds = elapsed.Seconds()
	r.res.BareRate = float64(r.cfg.Readings) / elapsed.Seconds()
	return nil
}

// consumeBare reads the readings topic from its start with a plain franz-go
// consumer, no group and no work, until it has seen want records: the ceiling a
// benchmark compares its consumer with. It returns how many it saw and how long
// that took, the client's creation included.
func consumeBare(ctx context.Context, cfg stream.Config, want int) (int, time.Duration, error) {
	start := time.Now()
	client, err := kgo.NewClient(append(stream.ClientOpts(cfg),
		kgo.ConsumeTopics(cfg.ReadingsTopic()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return 0, 0, fmt.Errorf("creating bare consumer: %w", err)
	}
	defer client.Close()
	seen := 0
	for seen < want {
		fetches := client.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return seen, 0, fmt.Errorf("bare consume saw %d of %d readings: %w", seen, want, err)
		}
		fetches.EachError(func(_ string, _ int32, e error) { err = e })
		if err != nil {
			return seen, 0, fmt.Errorf("bare consume: %w", err)
		}
		seen += fetches.NumRecords()
	}
	return seen, time.Since(start), nil
}

// full times the state consumer through every reading and counts the changes it
// found.
func (r *ingestRun) full(ctx context.Context) error {
	cfg := r.cfg
	reg := prometheus.NewRegistry()
	c, err := consumer.New(consumer.Config{Stream: cfg.Stream, Group: cfg.Stream.TopicPrefix + "state",
		MaxPollRecords: cfg.MaxPollRecords}, consumer.Deps{States: r.states}, reg, r.logger)
	if err != nil {
		return fmt.Errorf("ingest bench: %w", err)
	}
	elapsed, err := runUntil(ctx, c.Run, func() (bool, error) {
		consumed, err := counters(reg, "lockstream_readings_consumed_total")
		if err != nil || int(consumed[0]) < cfg.Readings {
			return false, err
		}
		// The consumer counts a batch's changes before the batch as consumed,
		// so a read after seeing every reading consumed has every change.
		// (One Gather reads its metrics in no set order.)
		changed, err := counters(reg, "lockstream_readings_changed_total")
		if err != nil {
			return false, err
		}
		r.res.Changes = int(changed[0])
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("ingest bench: full consumer: %w", err)
	}
	batches, err := histogramCount(reg, "lockstream_consumer_batch_size")
	if err != nil {
		return err
	}
	r.res.FullBatches = batches
	r.res.FullSeconds = elapsed.Seconds()
	r.res.FullRate = float64(cfg.Readings) / elapsed.Seconds()
	r.res.Ratio = r.res.FullRate / r.res.BareRate
	return nil
}

// historyPhase times the history writer storing every reading and every event
// the full consumer produced.
func (r *ingestRun) historyPhase(ctx context.Context) error {
	cfg := r.cfg
	reg := prometheus.NewRegistry()
	h, err := history.New(history.Config{Stream: cfg.Stream, Group: cfg.Stream.TopicPrefix + "history"},
		cfg.History, reg, r.logger)
	if err != nil {
		return fmt.Errorf("ingest bench: %w", err)
	}
	rows := 0
	elapsed, err := runUntil(ctx, h.Run, func() (bool, error) {
		v, err := counters(reg, "lockstream_history_rows_written_total")
		if err != nil {
			return false, err
		}
		rows = int(v[0])
		return rows >= cfg.Readings+r.res.Changes, nil
	})
	if err != nil {
		return fmt.Errorf("ingest bench: history writer: %w", err)
	}
	r.res.HistoryRows = rows
	r.res.HistorySeconds = elapsed.Seconds()
	r.res.HistoryRate = float64(rows) / elapsed.Seconds()
	return nil
}

// runUntil runs a daemon until done reports true, stops it and returns the time
// from start to done.
func runUntil(ctx context.Context, run func(context.Context) error, done func() (bool, error)) (time.Duration, error) {
	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	exited := make(chan error, 1)
	go func() { exited <- run(runCtx) }()
	defer func() {
		stop()
		<-exited
	}()
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case err := <-exited:
			if err == nil {
				err = errors.New("stopped early")
			}
			exited <- nil // for the deferred wait
			return 0, err
		case <-ticker.C:
		}
		ok, err := done()
		if err != nil {
			return 0, err
		}
		if ok {
			return time.Since(start), nil
		}
	}
}

// counters returns the sums of the named counters' series, in order.
func counters(reg prometheus.Gatherer, names ...string) ([]float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("ingest bench: reading metrics: %w", err)
	}
	out := make([]float64, len(names))
	for _, f := range families {
		for i, name := range names {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				out[i] += m.GetCounter().GetValue()
			}
		}
	}
	return out, nil
}

// histogramCount returns the observations of the named histogram.
func histogramCount(reg *prometheus.Registry, name string) (int, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("ingest bench: reading metrics: %w", err)
	}
	n := 0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				n += int(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return n, nil
}
