package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/stream"
)

// Defaults of PipelineConfig.
const (
	DefaultPipelineSensors         = 100_000
	DefaultPipelineLinked          = 20_000
	DefaultPipelineReadings        = DefaultIngestReadings
	DefaultPipelineLatencyRate     = 1000
	DefaultPipelineLatencyDuration = 10 * time.Second
	DefaultPipelineTimeout         = 15 * time.Minute
	DefaultPipelineClients         = 1
)

// PipelineConfig sizes the whole-pipeline benchmark.
type PipelineConfig struct {
	// Sensors is the fleet: every one registered, with a stored state. Defaults
	// to DefaultPipelineSensors (100,000).
	Sensors int `json:"sensors"`
	// Linked is how many of them (the first ones) the benchmark's client watches,
	// so that their changes become webhooks to the sink. Defaults to
	// DefaultPipelineLinked (20,000).
	Linked int `json:"linked"`
	// Readings is how many readings the throughput phase produces, round-robin
	// over the fleet. Defaults to DefaultPipelineReadings (1,000,000).
	Readings int `json:"readings"`
	// ChangeRate is the probability that a reading of the throughput phase
	// changes its sensor's state. Defaults to DefaultIngestChangeRate (0.01).
	ChangeRate float64 `json:"change_rate"`
	// LatencyRate is the changes per second of the latency phase, each a reading
	// of a linked sensor that flips it. Defaults to DefaultPipelineLatencyRate
	// (1,000).
	LatencyRate float64 `json:"latency_rate"`
	// LatencyDuration is how long the latency phase produces. Defaults to
	// DefaultPipelineLatencyDuration (10s); LatencyRate × LatencyDuration must
	// not exceed Linked (each sensor changes once in the phase).
	LatencyDuration time.Duration `json:"-"`
	// Timeout bounds the whole run. Defaults to DefaultPipelineTimeout (15m).
	Timeout time.Duration `json:"-"`
	// Seed makes the readings repeatable. Defaults to 1.
	Seed uint64 `json:"seed"`
	// Clients share the linked sensors (sensor i is watched by client
	// i mod Clients), each with a sink endpoint of its own. Defaults to
	// DefaultPipelineClients (1).
	Clients int `json:"clients"`
	// FailingClients of them (the last ones) answer 500 from the second
	// webhook phase on; 0 runs no second webhook phase.
	FailingClients int `json:"failing_clients"`
	// Webhook is the retrier's webhook sender's config, for the bare webhook
	// phase (signed POSTs with no database).
	Webhook webhook.Config `json:"-"`
	// Workers is how many webhooks the bare phase keeps in flight: the
	// retrier's. Defaults to retrier.DefaultWorkers.
	Workers int `json:"-"`
	// Posts measures latency as users produce it instead of the throughput,
	// webhook, failing, latency and bare phases: History webhooks delivered
	// first (whole-fleet flips, round after round), then LatencyRate single
	// readings a second as POST /v1/readings requests to the pipeline's API
	// for LatencyDuration.
	Posts bool `json:"posts,omitempty"`
	// History is how many webhooks the posts mode delivers before its posts.
	// Defaults to DefaultPipelineHistory (150,000).
	History int `json:"history,omitempty"`
}

// healthyLinked returns the linked sensors watched by the clients that
// answer 200 throughout, in index order.
func (c PipelineConfig) healthyLinked() []int {
	var out []int
	for i := range c.Linked {
		if !c.failing(i % c.Clients) {
			out = append(out, i)
		}
	}
	return out
}

// failing reports whether client k is one of the FailingClients.
func (c PipelineConfig) failing(k int) bool { return k >= c.Clients-c.FailingClients }

// WithDefaults returns the config with every unset field at its default.
func (c PipelineConfig) WithDefaults() PipelineConfig {
	if c.Sensors == 0 {
		c.Sensors = DefaultPipelineSensors
	}
	if c.Linked == 0 {
		c.Linked = min(DefaultPipelineLinked, c.Sensors)
	}
	if c.Readings == 0 {
		c.Readings = DefaultPipelineReadings
	}
	if c.ChangeRate == 0 {
		c.ChangeRate = DefaultIngestChangeRate
	}
	if c.LatencyRate == 0 {
		c.LatencyRate = DefaultPipelineLatencyRate
	}
	if c.LatencyDuration == 0 {
		c.LatencyDuration = DefaultPipelineLatencyDuration
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultPipelineTimeout
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	c.Clients = cmp.Or(c.Clients, DefaultPipelineClients)
	c.History = cmp.Or(c.History, DefaultPipelineHistory)
	c.Workers = cmp.Or(c.Workers, retrier.DefaultWorkers)
	return c
}

// Validate reports the first field that cannot work.
func (c PipelineConfig) Validate() error {
	switch {
	case c.Sensors < 1:
		return fmt.Errorf("pipeline bench config: Sensors %d, want at least 1", c.Sensors)
	case c.Linked < 1 || c.Linked > c.Sensors:
		return fmt.Errorf("pipeline bench config: Linked %d, want 1 to Sensors (%d)", c.Linked, c.Sensors)
	case c.Readings < 1:
		return fmt.Errorf("pipeline bench config: Readings %d, want at least 1", c.Readings)
	case c.ChangeRate < 0 || c.ChangeRate > 1:
		return fmt.Errorf("pipeline bench config: ChangeRate %v, want a probability", c.ChangeRate)
	case c.LatencyRate <= 0 || c.LatencyDuration <= 0:
		return fmt.Errorf("pipeline bench config: LatencyRate %v and LatencyDuration %v must be positive", c.LatencyRate, c.LatencyDuration)
	case int(c.LatencyRate*c.LatencyDuration.Seconds()) > c.Linked:
		return fmt.Errorf("pipeline bench config: LatencyRate × LatencyDuration = %d changes, more than Linked (%d)",
			int(c.LatencyRate*c.LatencyDuration.Seconds()), c.Linked)
	case c.Timeout <= 0:
		return fmt.Errorf("pipeline bench config: Timeout %v, want more than 0", c.Timeout)
	case c.Clients < 1 || c.Clients > c.Linked:
		return fmt.Errorf("pipeline bench config: Clients %d, want 1 to Linked (%d)", c.Clients, c.Linked)
	case c.FailingClients < 0 || c.FailingClients >= c.Clients:
		return fmt.Errorf("pipeline bench config: FailingClients %d, want 0 to Clients-1 (%d)", c.FailingClients, c.Clients-1)
	case int(c.LatencyRate*c.LatencyDuration.Seconds()) > len(c.healthyLinked()):
		return fmt.Errorf("pipeline bench config: LatencyRate × LatencyDuration = %d changes, more than the healthy clients' linked sensors (%d)",
			int(c.LatencyRate*c.LatencyDuration.Seconds()), len(c.healthyLinked()))
	}
	return nil
}

// PipelineStore is the running pipeline's Postgres (NewPostgresStore, opened
// with the pipeline's secret key), where the benchmark registers its fleet and
// its client.
type PipelineStore interface {
	IngestStore
	CreateClient(ctx context.Context, c registry.Client) (registry.Client, error)
	LinkSensors(ctx context.Context, clientID string, ids []string) error
	AnalyzeRegistry(ctx context.Context) error
	PostgresCost(ctx context.Context) (storage.PostgresCost, error)
}

// PipelineNode is a running pipeline, as the starter hands it over.
type PipelineNode struct {
	// Stream is where its topics are.
	Stream stream.Config
	// Metrics is the process registry every daemon reports to.
	Metrics prometheus.Gatherer
	// Store is its Postgres.
	Store PipelineStore
	// Statements returns how many statements its Postgres pool has sent so
	// far (every statement of a pipelined batch and every COPY counted);
	// nil: not counted.
	Statements func() int64
	// APIURL is where its API serves ("http://127.0.0.1:port"), and
	// IngestToken the token POST /v1/readings takes there; the posts mode
	// needs both.
	APIURL, IngestToken string
}

// PipelineRunner runs every daemon of the pipeline (as `lockstream all` does)
// until ctx ends, calling ready once, when they are about to run.
type PipelineRunner func(ctx context.Context, ready func(PipelineNode)) error

// Pipeline runs the whole-pipeline benchmark on the pipeline run starts and
// writes the result to out as JSON: sustained readings/s with every daemon
// running (and how long the history writer took to catch up), webhooks/s to a
// local sink that verifies every signature, latency from a reading's production
// to the sink's receipt at a fixed rate of changes, and a bare consume of the
// same records for the ratio.
func Pipeline(ctx context.Context, cfg PipelineConfig, run PipelineRunner, logger *slog.Logger, out io.Writer) (PipelineResult, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return PipelineResult{}, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	p := &pipelineRun{cfg: cfg, logger: logger}
	p.res.Config = cfg
	p.res.LoadBefore = loadAverage()
	runCtx, stop := context.WithCancel(ctx)
	readyc := make(chan PipelineNode, 1)
	exited := make(chan error, 1)
	go func() { exited <- run(runCtx, func(n PipelineNode) { readyc <- n }) }()
	stopPipeline := func() error {
		stop()
		err := <-exited
		exited <- err
		return err
	}
	defer func() { _ = stopPipeline() }()
	select {
	case p.node = <-readyc:
	case err := <-exited:
		return PipelineResult{}, fmt.Errorf("pipeline bench: the pipeline stopped before it was ready: %w", err)
	case <-ctx.Done():
		return PipelineResult{}, ctx.Err()
	}
	err := p.phases(ctx, exited)
	p.res.LoadAfter = loadAverage()
	if stopErr := stopPipeline(); err == nil && stopErr != nil {
		err = fmt.Errorf("pipeline bench: stopping the pipeline: %w", stopErr)
	}
	if err != nil {
		return p.res, err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p.res); err != nil {
		return p.res, fmt.Errorf("pipeline bench: writing result: %w", err)
	}
	return p.res, nil
}

// PipelineResult is what the pipeline benchmark measured.
type PipelineResult struct {
	Config PipelineConfig `json:"config"`
	// LoadBefore and LoadAfter are /proc/loadavg's 1, 5 and 15 minute figures.
	LoadBefore  [3]float64 `json:"load_before"`
	LoadAfter   [3]float64 `json:"load_after"`
	SeedSeconds float64    `json:"seed_seconds"`

	// Throughput phase: Readings produced as fast as the producer can, with
	// every daemon running.
	Changes        int     `json:"changes"`
	ReadingsPerSec float64 `json:"readings_per_second"`
	ProducePerSec  float64 `json:"produced_per_second"`
	// HistoryLagSeconds is how long after the state consumer had every reading
	// the history writer had stored every reading and event.
	HistoryLagSeconds float64 `json:"history_lag_seconds"`
	// ThroughputWebhooks is how many webhooks the phase's changes of linked
	// sensors made (a change superseded by a newer one before it was sent makes
	// none), out of ThroughputLinkedChanges.
	ThroughputWebhooks      int `json:"throughput_webhooks"`
	ThroughputLinkedChanges int `json:"throughput_linked_changes"`

	// Webhook phase: one change of each linked sensor, produced at once.
	Webhooks         int     `json:"webhooks"`
	WebhooksPerSec   float64 `json:"webhooks_per_second"`
	WebhookPhaseSecs float64 `json:"webhook_phase_seconds"`
	// WebhookStages says when, in seconds from the phase's first production,
	// each stage had handled every change of the phase.
	WebhookStages WebhookStages `json:"webhook_stages"`
	// What Postgres spent on the webhook phase, per webhook: WAL (the
	// cluster's: other databases' writes on the server count too), statements
	// the pipeline's pool sent (pg_stat_statements is not preloaded on the
	// benchmark's machine: a pgx tracer counts them, every statement of a
	// pipelined batch and every COPY included, statements run inside SQL
	// functions not), and CPU time of the backends serving the benchmark's
	// database (user + system, /proc; the WAL writer, checkpointer and
	// autovacuum not included).
	PostgresWALBytesPerWebhook   float64 `json:"postgres_wal_bytes_per_webhook"`
	PostgresStatementsPerWebhook float64 `json:"postgres_statements_per_webhook"`
	PostgresCPUMsPerWebhook      float64 `json:"postgres_cpu_ms_per_webhook"`
	PostgresBackendsSeen         int     `json:"postgres_backends_seen"`
	BareWebhooks                 int     `json:"bare_webhooks"`
	BareWebhooksPerSec           float64 `json:"bare_webhooks_per_s"`
	WebhookRatio                 float64 `json:"webhook_ratio"`

	// With FailingClients: the healthy clients' webhooks/s in the webhook
	// phase, all clients healthy (HealthyAllHealthyPerSec), and in the second
	// webhook phase, the failing ones answering 500 (HealthyWebhooksPerSec);
	// HealthyShare is the second over the first.
	HealthyWebhooks         int     `json:"healthy_webhooks,omitempty"`
	HealthyAllHealthyPerSec float64 `json:"healthy_webhooks_per_second_all_healthy,omitempty"`
	HealthyWebhooksPerSec   float64 `json:"healthy_webhooks_per_second,omitempty"`
	HealthyShare            float64 `json:"healthy_share,omitempty"`

	// Latency phase: LatencyRate changes a second; production → sink receipt.
	LatencySeconds float64 `json:"latency_phase_seconds"`
	LatencyChanges int     `json:"latency_changes"`
	LatencyP50Ms   float64 `json:"latency_p50_ms"`
	LatencyP99Ms   float64 `json:"latency_p99_ms"`
	LatencyMaxMs   float64 `json:"latency_max_ms"`
	// LatencyStages are p50 and p99, in milliseconds, of the time from the
	// production of the latency phase's n-th change until each stage's counter
	// had counted n (sampled every metricsPoll, so to about 25 ms): found by
	// the state consumer, written to the outbox by the fan-out, recorded sent
	// by the retrier. The stages work in parallel, so n-th is approximate.
	LatencyStages map[string][2]float64 `json:"latency_stages_ms"`

	// Bare consume of every reading of the run, and ReadingsPerSec / its rate.
	BareReadings int     `json:"bare_readings"`
	BarePerSec   float64 `json:"bare_consume_per_second"`
	Ratio        float64 `json:"ratio"`

	// Posts mode: HistoryWebhooks delivered first (in HistorySeconds), then
	// PostChanges single-reading POST /v1/readings requests at LatencyRate:
	// the time from just before a request to the sink's receipt of its
	// webhook (PostP50Ms…), to the request's answer (PostAnswer…), and the
	// stages as LatencyStages has them.
	HistoryWebhooks int                   `json:"history_webhooks,omitempty"`
	HistorySeconds  float64               `json:"history_seconds,omitempty"`
	PostChanges     int                   `json:"post_changes,omitempty"`
	PostP50Ms       float64               `json:"post_p50_ms,omitempty"`
	PostP99Ms       float64               `json:"post_p99_ms,omitempty"`
	PostMaxMs       float64               `json:"post_max_ms,omitempty"`
	PostAnswerP50Ms float64               `json:"post_answer_p50_ms,omitempty"`
	PostAnswerP99Ms float64               `json:"post_answer_p99_ms,omitempty"`
	PostStages      map[string][2]float64 `json:"post_stages_ms,omitempty"`

	// Correctness: webhooks the sink received twice (same webhook-id) and
	// those whose signature did not verify; both must be 0.
	Duplicates    int `json:"duplicate_webhooks"`
	BadSignatures int `json:"bad_signatures"`
}

type pipelineRun struct {
	cfg    PipelineConfig
	logger *slog.Logger
	node   PipelineNode
	client *kgo.Client
	sink   *pipelineSink
	// state is every sensor's current data, as produced.
	state []int8
	// produced counts every reading produced.
	produced int
	res      PipelineResult
}

func (p *pipelineRun) phases(ctx context.Context, exited <-chan error) error {
	client, err := kgo.NewClient(append(stream.ClientOpts(p.node.Stream), kgo.MaxBufferedRecords(200_000),
		kgo.ProducerLinger(time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("pipeline bench: producer: %w", err)
	}
	defer client.Close()
	p.client = client
	sink, err := startPipelineSink(p.cfg.Clients, p.cfg.FailingClients)
	if err != nil {
		return err
	}
	defer sink.close()
	p.sink = sink
	type step struct {
		name string
		run  func(context.Context) error
	}
	steps := []step{
		{"seed", p.seed}, {"warm-up", p.warmUp}, {"throughput", p.throughput}, {"webhooks", p.webhooks},
		{"failing", p.failingPhase}, {"latency", p.latency}, {"bare", p.bare}, {"bare-webhooks", p.bareWebhooks},
	}
	if p.cfg.Posts {
		steps = []step{{"seed", p.seed}, {"warm-up", p.warmUp}, {"history", p.history}, {"posts", p.posts}}
	}
	for _, s := range steps {
		select {
		case err := <-exited:
			return fmt.Errorf("pipeline bench: the pipeline stopped during %s: %w", s.name, err)
		default:
		}
		p.logger.Info("pipeline bench phase", "phase", s.name)
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("pipeline bench: %s: %w", s.name, err)
		}
	}
	p.res.Duplicates, p.res.BadSignatures = sink.faults()
	return nil
}

// seed registers the fleet with a stored state for every sensor, and one client
// whose webhook is the sink, watching the first Linked sensors.
func (p *pipelineRun) seed(ctx context.Context) error {
	start := time.Now()
	rng := mrand.New(mrand.NewPCG(p.cfg.Seed, p.cfg.Seed))
	p.state = make([]int8, p.cfg.Sensors)
	before := start.Add(-time.Hour)
	ids := make([]string, 0, seedChunk)
	changes := make([]consumer.StateChange, 0, seedChunk)
	for i := range p.cfg.Sensors {
		p.state[i] = int8(rng.IntN(2))
		ids = append(ids, BenchSensorID(i))
		changes = append(changes, consumer.StateChange{SensorID: BenchSensorID(i), Data: int(p.state[i]),
			ChangedAt: before, Partition: -1, Offset: -1})
		if len(ids) == seedChunk || i == p.cfg.Sensors-1 {
			if err := p.node.Store.CreateSensors(ctx, ids, "bench"); err != nil {
				return err
			}
			if err := p.node.Store.ApplyStateChanges(ctx, changes); err != nil {
				return err
			}
			ids, changes = ids[:0], changes[:0]
		}
	}
	for k, ep := range p.sink.endpoints {
		secret := webhook.NewSecret()
		c, err := p.node.Store.CreateClient(ctx, registry.Client{Name: fmt.Sprintf("pipeline bench %d", k),
			WebhookURL: ep.url, Secret: secret})
		if err != nil {
			return err
		}
		ep.secret = secret
		var linked []string
		for i := k; i < p.cfg.Linked; i += p.cfg.Clients {
			linked = append(linked, BenchSensorID(i))
		}
		for chunk := range slices.Chunk(linked, seedChunk) {
			if err := p.node.Store.LinkSensors(ctx, c.ID, chunk); err != nil {
				return err
			}
		}
	}
	// A fleet registered over time has statistics (autovacuum); one
	// registered in bulk a moment ago has none yet.
	if err := p.node.Store.AnalyzeRegistry(ctx); err != nil {
		return err
	}
	p.res.SeedSeconds = time.Since(start).Seconds()
	return nil
}

// produce sends one reading of sensor i with data d, timestamped at.
func (p *pipelineRun) produce(ctx context.Context, i int, d int8, at time.Time, errc chan<- error) {
	id := BenchSensorID(i)
	value := fmt.Appendf(nil, `{"sensor_id":%q,"data":%d}`, id, d)
	p.produced++
	p.client.Produce(ctx, &kgo.Record{Topic: p.node.Stream.ReadingsTopic(), Key: []byte(id), Value: value, Timestamp: at},
		func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
}

func (p *pipelineRun) flush(ctx context.Context, errc <-chan error) error {
	if err := p.client.Flush(ctx); err != nil {
		return fmt.Errorf("flushing readings: %w", err)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("producing readings: %w", err)
	default:
		return nil
	}
}

// warmUp produces one reading of every sensor, with its stored state (no
// change), and waits until the state consumer and the history writer have
// them: the consumer groups have joined and the consumer's cache holds the
// fleet, so the throughput phase measures the pipeline's steady state.
func (p *pipelineRun) warmUp(ctx context.Context) error {
	errc := make(chan error, 1)
	for i := range p.cfg.Sensors {
		p.produce(ctx, i, p.state[i], time.Now(), errc)
	}
	if err := p.flush(ctx, errc); err != nil {
		return err
	}
	if err := p.waitCounter(ctx, "lockstream_readings_consumed_total", float64(p.produced)); err != nil {
		return err
	}
	return p.waitCounter(ctx, "lockstream_history_rows_written_total", float64(p.produced))
}

// throughput produces Readings readings as fast as it can and times the state
// consumer through them, then waits for the history writer and the webhooks.
func (p *pipelineRun) throughput(ctx context.Context) error {
	cfg := p.cfg
	rng := mrand.New(mrand.NewPCG(cfg.Seed+1, cfg.Seed+1))
	consumed0, err := p.counter("lockstream_readings_consumed_total")
	if err != nil {
		return err
	}
	expect := p.sink.expect("throughput")
	errc := make(chan error, 1)
	start := time.Now()
	for n := range cfg.Readings {
		i, now := n%cfg.Sensors, time.Now()
		if rng.Float64() < cfg.ChangeRate {
			p.state[i] = 1 - p.state[i]
			p.res.Changes++
			if i < cfg.Linked {
				p.res.ThroughputLinkedChanges++
				expect(BenchSensorID(i), int(p.state[i]), now)
			}
		}
		p.produce(ctx, i, p.state[i], now, errc)
	}
	if err := p.flush(ctx, errc); err != nil {
		return err
	}
	p.res.ProducePerSec = float64(cfg.Readings) / time.Since(start).Seconds()
	if err := p.waitCounter(ctx, "lockstream_readings_consumed_total", consumed0+float64(cfg.Readings)); err != nil {
		return err
	}
	consumedAt := time.Now()
	p.res.ReadingsPerSec = float64(cfg.Readings) / consumedAt.Sub(start).Seconds()
	changed, err := p.counter("lockstream_readings_changed_total")
	if err != nil {
		return err
	}
	if err := p.waitCounter(ctx, "lockstream_history_rows_written_total", float64(p.produced)+changed); err != nil {
		return err
	}
	p.res.HistoryLagSeconds = time.Since(consumedAt).Seconds()
	received, err := p.sink.waitSettled(ctx, "throughput", p.res.ThroughputLinkedChanges)
	p.res.ThroughputWebhooks = received
	return err
}

// webhooks flips every linked sensor once, all at once, and times their
// webhooks.
func (p *pipelineRun) webhooks(ctx context.Context) error {
	expect := p.sink.expect("webhooks")
	errc := make(chan error, 1)
	recorded0, err := p.counter("lockstream_deliveries_total")
	if err != nil {
		return err
	}
	stages, err := p.watchStages(ctx, float64(p.cfg.Linked), "lockstream_readings_changed_total",
		"lockstream_notifications_created_total", "lockstream_deliveries_total")
	if err != nil {
		return err
	}
	cost, err := p.readCost(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	for i := range p.cfg.Linked {
		now := time.Now()
		p.state[i] = 1 - p.state[i]
		expect(BenchSensorID(i), int(p.state[i]), now)
		p.produce(ctx, i, p.state[i], now, errc)
	}
	if err := p.flush(ctx, errc); err != nil {
		return err
	}
	received, err := p.sink.waitSettled(ctx, "webhooks", p.cfg.Linked)
	if err != nil {
		return err
	}
	elapsed := p.sink.last("webhooks").Sub(start)
	if p.cfg.FailingClients > 0 {
		p.res.HealthyAllHealthyPerSec = float64(len(p.cfg.healthyLinked())) / p.sink.lastHealthy("webhooks").Sub(start).Seconds()
	}
	// The next phase starts once the retrier has recorded every outcome, so
	// that it measures latency, not this phase's tail.
	if err := p.waitCounter(ctx, "lockstream_deliveries_total", recorded0+float64(p.cfg.Linked)); err != nil {
		return err
	}
	at := stages()
	since := func(t time.Time) float64 {
		if t.IsZero() {
			return 0 // not reached when the sink had every webhook
		}
		return t.Sub(start).Seconds()
	}
	p.res.WebhookStages = WebhookStages{Changed: since(at[0]), Notified: since(at[1]), Recorded: since(at[2])}
	if err := p.costPerWebhook(ctx, cost, p.cfg.Linked); err != nil {
		return err
	}
	p.res.Webhooks = received
	p.res.WebhookPhaseSecs = elapsed.Seconds()
	p.res.WebhooksPerSec = float64(p.cfg.Linked) / elapsed.Seconds()
	return nil
}

// failingPhase, with FailingClients, makes those clients' endpoints answer
// 500 from now on and flips every linked sensor again, all at once: the
// healthy clients' webhooks/s, beside their figure with every client healthy.
func (p *pipelineRun) failingPhase(ctx context.Context) error {
	if p.cfg.FailingClients == 0 {
		return nil
	}
	for _, ep := range p.sink.endpoints {
		if !ep.healthy {
			ep.failing.Store(true)
		}
	}
	expect := p.sink.expect("failing")
	errc := make(chan error, 1)
	recorded0, err := p.counter("lockstream_deliveries_total")
	if err != nil {
		return err
	}
	start := time.Now()
	healthy := 0
	for i := range p.cfg.Linked {
		now := time.Now()
		p.state[i] = 1 - p.state[i]
		if !p.cfg.failing(i % p.cfg.Clients) {
			expect(BenchSensorID(i), int(p.state[i]), now)
			healthy++
		}
		p.produce(ctx, i, p.state[i], now, errc)
	}
	if err := p.flush(ctx, errc); err != nil {
		return err
	}
	received, err := p.sink.waitSettled(ctx, "failing", healthy)
	if err != nil {
		return err
	}
	p.res.HealthyWebhooks = received
	p.res.HealthyWebhooksPerSec = float64(healthy) / p.sink.lastHealthy("failing").Sub(start).Seconds()
	p.res.HealthyShare = p.res.HealthyWebhooksPerSec / p.res.HealthyAllHealthyPerSec
	// Every outcome recorded (the failing ones' RETRY too) before the latency
	// phase counts its own.
	return p.waitCounter(ctx, "lockstream_deliveries_total", recorded0+float64(p.cfg.Linked))
}

// postgresCost is a reading of what Postgres has spent: the WAL position, the
// statements sent, and each backend's CPU time.
type postgresCost struct {
	wal        int64
	statements int64
	cpu        map[int]time.Duration
}

func (p *pipelineRun) readCost(ctx context.Context) (postgresCost, error) {
	c, err := p.node.Store.PostgresCost(ctx)
	if err != nil {
		return postgresCost{}, err
	}
	out := postgresCost{wal: c.WALBytes, cpu: map[int]time.Duration{}}
	if p.node.Statements != nil {
		out.statements = p.node.Statements()
	}
	for _, pid := range c.BackendPIDs {
		if t, ok := processCPU(pid); ok {
			out.cpu[pid] = t
		}
	}
	return out, nil
}

// costPerWebhook reads the cost again and files the difference since before,
// per webhook. A backend that started since counts from zero; one that ended
// since is lost (the pool keeps its connections).
func (p *pipelineRun) costPerWebhook(ctx context.Context, before postgresCost, webhooks int) error {
	after, err := p.readCost(ctx)
	if err != nil {
		return err
	}
	var cpu time.Duration
	for pid, t := range after.cpu {
		cpu += t - before.cpu[pid]
	}
	n := float64(webhooks)
	p.res.PostgresWALBytesPerWebhook = float64(after.wal-before.wal) / n
	p.res.PostgresStatementsPerWebhook = float64(after.statements-before.statements) / n
	p.res.PostgresCPUMsPerWebhook = float64(cpu.Microseconds()) / 1000 / n
	p.res.PostgresBackendsSeen = len(after.cpu)
	return nil
}

// clockTick is the unit of /proc's CPU times (USER_HZ: 100 on Linux).
const clockTick = 10 * time.Millisecond

// processCPU reads a process's user + system CPU time from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command may hold spaces: the fields after it start past its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	// Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the command.
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * clockTick, true
}

// bareWebhooks sends as many signed webhooks as the webhook phase delivered,
// from this process to a healthy client's endpoint with the retrier's webhook
// sender and its number of workers, no database: the machine's delivery
// ceiling, which the pipeline's webhooks/s is compared with.
func (p *pipelineRun) bareWebhooks(ctx context.Context) error {
	sender, err := webhook.New(p.cfg.Webhook, nil)
	if err != nil {
		return fmt.Errorf("bare webhooks: %w", err)
	}
	defer sender.Close()
	ep := p.sink.endpoints[0]
	target := webhook.Target{URL: strings.TrimSuffix(ep.url, "/hook") + "/bare", Secret: ep.secret}
	total := p.cfg.Linked
	next := atomic.Int64{}
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range min(p.cfg.Workers, total) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= total || ctx.Err() != nil {
					return
				}
				data, prev := 1, 0
				res := sender.Send(ctx, target, notifier.Notification{ID: fmt.Sprintf("bare-%d", i), EventID: fmt.Sprintf("bare-%d", i),
					Type: "state_changed", SensorID: BenchSensorID(i), Data: &data, Previous: &prev, At: time.Now(), Attempt: 1})
				if res.Outcome != notifier.Sent {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("bare webhooks: %d of %d not accepted", n, total)
	}
	p.sink.mu.Lock()
	p.res.BareWebhooks = p.sink.bare
	p.sink.mu.Unlock()
	p.res.BareWebhooksPerSec = float64(total) / elapsed.Seconds()
	p.res.WebhookRatio = p.res.WebhooksPerSec / p.res.BareWebhooksPerSec
	return nil
}

// WebhookStages are the webhook phase's stage times, in seconds from its first
// production until the stage had handled every change: the state consumer
// found them (Changed), the fan-out wrote their deliveries (Notified) and the
// retrier recorded them sent (Recorded, after the sink's answer).
type WebhookStages struct {
	Changed  float64 `json:"changed"`
	Notified float64 `json:"notified"`
	Recorded float64 `json:"recorded"`
}

// watchStages polls the named counters until each has grown by n, and
// returns a function that stops the watch and returns when each did (zero
// times for those that did not).
func (p *pipelineRun) watchStages(ctx context.Context, n float64, names ...string) (func() []time.Time, error) {
	base, err := counters(p.node.Metrics, names...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	at := make([]time.Time, len(names))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for left := len(names); left > 0; {
			select {
			case <-ctx.Done():
				return
			case <-time.After(metricsPoll):
			}
			v, err := counters(p.node.Metrics, names...)
			if err != nil {
				return
			}
			for i := range v {
				if at[i].IsZero() && v[i]-base[i] >= n {
					at[i] = time.Now()
					left--
				}
			}
		}
	}()
	return func() []time.Time {
		cancel()
		<-done
		// The counters may have got there since the watch's last look.
		if v, err := counters(p.node.Metrics, names...); err == nil {
			for i := range v {
				if at[i].IsZero() && v[i]-base[i] >= n {
					at[i] = time.Now()
				}
			}
		}
		return at
	}, nil
}

// latencyStages are the counters sampleStages follows, by the name the report
// gives them.
var latencyStages = []struct{ name, metric string }{
	{"changed", "lockstream_readings_changed_total"},
	{"notified", "lockstream_notifications_created_total"},
	{"recorded", "lockstream_deliveries_total"},
}

// sampleStages reads the stage counters every metricsPoll until the returned
// function is called with the production times of the phase's changes; it
// returns each stage's p50 and p99 lag behind production, in milliseconds.
func (p *pipelineRun) sampleStages(ctx context.Context) (func(produced []time.Time) map[string][2]float64, error) {
	names := make([]string, len(latencyStages))
	for i, st := range latencyStages {
		names[i] = st.metric
	}
	base, err := counters(p.node.Metrics, names...)
	if err != nil {
		return nil, err
	}
	type sample struct {
		at time.Time
		v  []float64
	}
	var samples []sample
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(metricsPoll):
			}
			if v, err := counters(p.node.Metrics, names...); err == nil {
				samples = append(samples, sample{time.Now(), v})
			}
		}
	}()
	return func(produced []time.Time) map[string][2]float64 {
		cancel()
		<-done
		out := map[string][2]float64{}
		for i, st := range latencyStages {
			var lags []time.Duration
			j := 0
			for k, at := range produced {
				for j < len(samples) && samples[j].v[i]-base[i] < float64(k+1) {
					j++
				}
				if j == len(samples) {
					break
				}
				lags = append(lags, samples[j].at.Sub(at))
			}
			out[st.name] = [2]float64{quantileMs(lags, 0.5), quantileMs(lags, 0.99)}
		}
		return out
	}, nil
}

// latency flips linked sensors at LatencyRate for LatencyDuration, one sensor
// each, and measures production → receipt.
func (p *pipelineRun) latency(ctx context.Context) error {
	expect := p.sink.expect("latency")
	errc := make(chan error, 1)
	total := int(p.cfg.LatencyRate * p.cfg.LatencyDuration.Seconds())
	const tick = 10 * time.Millisecond
	perTick := p.cfg.LatencyRate * tick.Seconds()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	sampler, err := p.sampleStages(ctx)
	if err != nil {
		return err
	}
	produced := make([]time.Time, 0, total)
	healthy := p.cfg.healthyLinked()
	start := time.Now()
	for sent := 0; sent < total; {
		due := min(total, int(perTick*float64(time.Since(start)/tick+1)))
		for ; sent < due; sent++ {
			i, now := healthy[sent], time.Now()
			p.state[i] = 1 - p.state[i]
			expect(BenchSensorID(i), int(p.state[i]), now)
			p.produce(ctx, i, p.state[i], now, errc)
			produced = append(produced, now)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			return fmt.Errorf("producing readings: %w", err)
		case <-ticker.C:
		}
	}
	if err := p.flush(ctx, errc); err != nil {
		return err
	}
	if _, err := p.sink.waitSettled(ctx, "latency", total); err != nil {
		return err
	}
	p.res.LatencyStages = sampler(produced)
	p.res.LatencySeconds = p.cfg.LatencyDuration.Seconds()
	lat := p.sink.latencies("latency")
	p.res.LatencyChanges = len(lat)
	p.res.LatencyP50Ms, p.res.LatencyP99Ms, p.res.LatencyMaxMs = quantileMs(lat, 0.50), quantileMs(lat, 0.99), quantileMs(lat, 1)
	return nil
}

// bare times a plain franz-go consumer reading every reading of the run.
func (p *pipelineRun) bare(ctx context.Context) error {
	seen, elapsed, err := consumeBare(ctx, p.node.Stream, p.produced)
	if err != nil {
		return err
	}
	p.res.BareReadings = seen
	p.res.BarePerSec = float64(seen) / elapsed.Seconds()
	p.res.Ratio = p.res.ReadingsPerSec / p.res.BarePerSec
	return nil
}

func (p *pipelineRun) counter(name string) (float64, error) {
	v, err := counters(p.node.Metrics, name)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// waitCounter polls the named counter until it reaches want.
func (p *pipelineRun) waitCounter(ctx context.Context, name string, want float64) error {
	for {
		v, err := p.counter(name)
		if err != nil {
			return err
		}
		if v >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to reach %.0f (at %.0f): %w", name, want, v, ctx.Err())
		case <-time.After(metricsPoll):
		}
	}
}

// metricsPoll is how often the benchmark reads the pipeline's counters: a
// Gather of the process registry reads /proc and serializes every metric, so
// reading it every few milliseconds would load the pipeline measured. The times of the throughput and webhook phases are therefore
// accurate to about this much.
const metricsPoll = 25 * time.Millisecond

// quantileMs returns the q-quantile of d in milliseconds (nearest rank).
func quantileMs(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := min(len(s)-1, max(0, int(q*float64(len(s))+0.5)-1))
	return float64(s[i].Microseconds()) / 1000
}

// loadAverage reads the 1, 5 and 15 minute load averages; zeros where
// /proc/loadavg cannot be read.
func loadAverage() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	_, _ = fmt.Sscan(string(b), &out[0], &out[1], &out[2])
	return out
}

// pipelineSink is the client systems: one endpoint (a listener of its own)
// per client; it verifies each webhook's signature and records when each
// expected change arrived.
type pipelineSink struct {
	endpoints []*sinkEndpoint

	mu     sync.Mutex
	phases map[string]*sinkPhase
	// changes are each sensor's expected changes, oldest first.
	changes map[string][]*sinkExpect
	seen    map[string]bool
	dups    int
	bad     int
	// bare counts the verified webhooks of the bare phase.
	bare int
}

// sinkEndpoint is one client's webhook endpoint.
type sinkEndpoint struct {
	sink *pipelineSink
	url  string
	srv  *http.Server
	// secret is set once, before the pipeline sends anything.
	secret string
	// failing makes it answer 500 to everything but the bare phase.
	failing atomic.Bool
	// healthy: not one of the FailingClients, whose arrivals lastHealthy
	// times.
	healthy bool
}

// sinkExpect is one change produced. Only a sensor's newest change is sure to
// be sent: an older one not sent yet may be superseded.
type sinkExpect struct {
	phase    *sinkPhase
	data     int
	produced time.Time
	received bool
	// optional: a newer change of the sensor was produced before this one
	// arrived.
	optional bool
}

type sinkPhase struct {
	// expected and received count the changes that must arrive; all counts
	// every arrival of the phase's changes, superseded ones' included.
	expected, received, all int
	// last is the last arrival; lastHealthy the last at an endpoint that is
	// not one of the failing clients'.
	last, lastHealthy time.Time
	latencies         []time.Duration
}

func startPipelineSink(endpoints, failing int) (*pipelineSink, error) {
	s := &pipelineSink{phases: map[string]*sinkPhase{}, changes: map[string][]*sinkExpect{}, seen: map[string]bool{}}
	for range endpoints {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			s.close()
			return nil, fmt.Errorf("pipeline bench: sink: %w", err)
		}
		ep := &sinkEndpoint{sink: s, url: "http://" + ln.Addr().String() + "/hook", healthy: len(s.endpoints) < endpoints-failing}
		ep.srv = &http.Server{Handler: ep, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = ep.srv.Serve(ln) }()
		s.endpoints = append(s.endpoints, ep)
	}
	return s, nil
}

func (s *pipelineSink) close() {
	for _, ep := range s.endpoints {
		_ = ep.srv.Close()
	}
}

// ServeHTTP verifies the webhook and records it: 204 when it verifies, 401 when
// it does not (counted); 500 while the endpoint is failing. Path /bare is the
// bare phase's: verified and counted only.
func (ep *sinkEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "reading body", http.StatusBadRequest)
		return
	}
	bare := r.URL.Path == "/bare"
	if ep.failing.Load() && !bare {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	verifyErr := webhook.Verify(ep.secret, r.Header, body, 0)
	var msg webhook.Body
	decodeErr := json.Unmarshal(body, &msg)
	s := ep.sink
	s.mu.Lock()
	defer s.mu.Unlock()
	if verifyErr != nil || decodeErr != nil || msg.Data == nil {
		s.bad++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if bare {
		s.bare++
		w.WriteHeader(http.StatusNoContent)
		return
	}
	id := r.Header.Get(webhook.HeaderID)
	if s.seen[id] {
		s.dups++
		w.WriteHeader(http.StatusNoContent)
		return
	}
	s.seen[id] = true
	if e := s.match(msg.Sensor.ID, *msg.Data, msg.At); e != nil {
		e.received = true
		e.phase.all++
		e.phase.last = at
		if ep.healthy {
			e.phase.lastHealthy = at
		}
		if !e.optional {
			e.phase.received++
		}
		if !e.produced.IsZero() {
			e.phase.latencies = append(e.phase.latencies, at.Sub(e.produced))
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// match finds the change a webhook is about: of the sensor's changes to data
// not received yet and produced at or before the event's time (the record's
// timestamp: the producer's, or the broker's append time), the newest.
func (s *pipelineSink) match(sensor string, data int, at time.Time) *sinkExpect {
	list := s.changes[sensor]
	for i := len(list) - 1; i >= 0; i-- {
		e := list[i]
		if !e.received && e.data == data && e.produced.UnixMilli() <= at.UnixMilli() {
			return e
		}
	}
	return nil
}

// expect opens a phase and returns how to file its changes, each with the
// time it was produced (the record's timestamp).
func (s *pipelineSink) expect(name string) func(sensor string, data int, produced time.Time) {
	s.mu.Lock()
	ph := &sinkPhase{}
	s.phases[name] = ph
	s.mu.Unlock()
	return func(sensor string, data int, produced time.Time) {
		s.mu.Lock()
		defer s.mu.Unlock()
		list := s.changes[sensor]
		for _, e := range list {
			if !e.received && !e.optional {
				e.optional = true
				e.phase.expected--
			}
		}
		s.changes[sensor] = append(list, &sinkExpect{phase: ph, data: data, produced: produced})
		ph.expected++
	}
}

// waitSettled waits until every change of the phase that must arrive did (a
// sensor's newest). It returns the arrivals of the phase's changes and how
// many it produced.
func (s *pipelineSink) waitSettled(ctx context.Context, name string, produced int) (int, error) {
	for {
		s.mu.Lock()
		ph := s.phases[name]
		received, expected, all := ph.received, ph.expected, ph.all
		s.mu.Unlock()
		if received >= expected {
			return all, nil
		}
		select {
		case <-ctx.Done():
			return all, fmt.Errorf("sink got %d of the %d webhooks phase %s must deliver (%d changes produced): %w",
				received, expected, name, produced, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (s *pipelineSink) last(name string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.phases[name].last
}

// lastHealthy is the phase's last arrival at a healthy client's endpoint.
func (s *pipelineSink) lastHealthy(name string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.phases[name].lastHealthy
}

func (s *pipelineSink) latencies(name string) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.phases[name].latencies)
}

func (s *pipelineSink) faults() (dups, bad int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dups, s.bad
}

// errPipelineFaults is returned by CheckPipeline.
var errPipelineFaults = errors.New("pipeline bench: the sink saw faults")

// Check reports duplicates, bad signatures or missing webhooks as an error.
func (r PipelineResult) Check() error {
	var problems []string
	if r.Duplicates > 0 {
		problems = append(problems, fmt.Sprintf("%d webhooks received twice", r.Duplicates))
	}
	if r.BadSignatures > 0 {
		problems = append(problems, fmt.Sprintf("%d webhooks failed signature verification", r.BadSignatures))
	}
	want := int(r.Config.LatencyRate * r.Config.LatencyDuration.Seconds())
	if r.Config.Posts {
		if r.PostChanges != want {
			problems = append(problems, fmt.Sprintf("posts phase: %d of %d", r.PostChanges, want))
		}
	} else {
		if r.Webhooks != r.Config.Linked {
			problems = append(problems, fmt.Sprintf("webhook phase: %d of %d", r.Webhooks, r.Config.Linked))
		}
		if r.LatencyChanges != want {
			problems = append(problems, fmt.Sprintf("latency phase: %d of %d", r.LatencyChanges, want))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", errPipelineFaults, strings.Join(problems, "; "))
	}
	return nil
}
