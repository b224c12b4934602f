package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/bench"
	"github.com/lockstream/lockstream/bridge/mqtt"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/internal/settings"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/stream"
)

// toolStream is the Kafka config of the tools (simulate, bench): with no brokers
// configured they talk to the embedded broker of a running `lockstream all`.
func toolStream(cfg stream.Config) stream.Config {
	if len(cfg.Brokers) == 0 {
		cfg.Brokers = []string{embeddedBrokerAddr}
	}
	return cfg
}

func simulateCommand() command {
	var (
		sim        stream.SimulateConfig
		mqttURL    string
		mqttPrefix string
		kafka      stream.Config
	)
	return command{
		name:    "simulate",
		summary: "publish readings of a simulated fleet to Kafka (default: a running `all`'s embedded broker) or over MQTT",
		setup: func(s *settings.Set, fs *flag.FlagSet) runner {
			s.Register(&kafka)
			fs.IntVar(&sim.Sensors, "sensors", stream.DefaultSimSensors, "fleet size")
			fs.IntVar(&sim.FirstSensor, "first-sensor", 0, "number of the fleet's first sensor (two fleets must not share sensors)")
			fs.Float64Var(&sim.Rate, "rate", stream.DefaultSimRate, "readings per second of the whole fleet")
			fs.Float64Var(&sim.Flip, "flip", stream.DefaultSimFlip, "probability that a reading changes its sensor's state")
			fs.Float64Var(&sim.SilentFraction, "silent", stream.DefaultSimSilentFraction, "share of sensors that fall silent")
			fs.DurationVar(&sim.SilentAfter, "silent-after", stream.DefaultSimSilentAfter, "when the silent sensors stop")
			fs.DurationVar(&sim.Duration, "duration", 0, "stop after this long (0 = until interrupted)")
			fs.StringVar(&mqttURL, "mqtt-url", "", "publish over MQTT to this broker (QoS 1, the MQTT bridge's way in) instead of to Kafka")
			fs.StringVar(&mqttPrefix, "mqtt-topic-prefix", "lockstream/readings/", "MQTT: readings go to this prefix + the sensor id")
			return func(ctx context.Context, _ []string, stdout io.Writer, logger *slog.Logger) error {
				return runSimulate(ctx, sim, mqttURL, mqttPrefix, toolStream(kafka), stdout, logger)
			}
		},
	}
}

// runSimulate is `lockstream simulate`: over MQTT when mqttURL is set, else to
// Kafka.
func runSimulate(ctx context.Context, sim stream.SimulateConfig, mqttURL, mqttPrefix string, cfg stream.Config,
	stdout io.Writer, logger *slog.Logger) error {
	if mqttURL != "" {
		pub, err := mqtt.NewPublisher(ctx, mqttURL, mqttPrefix, 2)
		if err != nil {
			return fmt.Errorf("simulate: %w", err)
		}
		defer pub.Close()
		return simulated(stream.Simulate(ctx, pub, sim, stdout))
	}
	client, err := kgo.NewClient(append(stream.ClientOpts(cfg), stream.WithLogger(logger))...)
	if err != nil {
		return fmt.Errorf("simulate: kafka client: %w", err)
	}
	defer client.Close()
	if err := stream.EnsureTopics(ctx, client, cfg); err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	sim.Topic = cfg.ReadingsTopic()
	return simulated(stream.Simulate(ctx, client, sim, stdout))
}

// simulated is a simulation's error, with an interrupt as a clean stop.
func simulated(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// benchCommand is `lockstream bench <benchmark>`: a group whose benchmarks are
// commands of their own, so that each lists only the settings it reads.
func benchCommand() command {
	return command{
		name: "bench",
		summary: "benchmarks, as JSON: `lockstream bench ingest` (bare consume vs the full consumer), " +
			"`lockstream bench pipeline` (every daemon of `all` on private databases: readings/s, webhooks/s, latency); " +
			"with no brokers configured, on an embedded broker of their own",
		args:        " <benchmark>",
		subcommands: []command{benchIngestCommand(), benchPipelineCommand()},
	}
}

// registerFleetFlags declares the fleet flags both benchmarks take.
func registerFleetFlags(fs *flag.FlagSet, ingest *bench.IngestConfig) {
	fs.IntVar(&ingest.Readings, "readings", bench.DefaultIngestReadings, "readings to produce (pipeline: in its throughput phase)")
	fs.IntVar(&ingest.Sensors, "sensors", bench.DefaultIngestSensors, "sensors they come from (pipeline: the fleet)")
	fs.Float64Var(&ingest.ChangeRate, "change-rate", bench.DefaultIngestChangeRate, "probability a reading is a change")
}

func benchIngestCommand() command {
	return command{
		name:    "ingest",
		summary: "bare consume vs the full consumer (sensor state, events, history) on private, migrated stores",
		setup: func(s *settings.Set, fs *flag.FlagSet) runner {
			// The consumer and the history writer: Postgres, ClickHouse and
			// Kafka; Redis for the private stores' key prefix.
			node := &nodeSettings{need: usesPostgres | usesRedis | usesClickHouse | usesKafka}
			s.Register(node)
			var (
				ingest     bench.IngestConfig
				keepStores bool
			)
			registerFleetFlags(fs, &ingest)
			fs.BoolVar(&ingest.ColdStart, "cold-start", false, "measure from unknown state (every sensor's first reading a change) instead of seeding it")
			fs.BoolVar(&keepStores, "keep-stores", false, "keep the benchmark's private databases and Redis prefix afterwards (their names are logged)")
			return func(ctx context.Context, _ []string, stdout io.Writer, logger *slog.Logger) error {
				return runBenchIngest(ctx, node, ingest, keepStores, stdout, logger)
			}
		},
	}
}

func benchPipelineCommand() command {
	return command{
		name:    "pipeline",
		summary: "every daemon of `all` on private databases: readings/s, webhooks/s, latency",
		setup: func(s *settings.Set, fs *flag.FlagSet) runner {
			// pipeline runs every daemon, so it reads every daemon's settings.
			all := newAllSettings()
			s.Register(all)
			var (
				fleet    bench.IngestConfig
				pipeline pipelineFlags
			)
			registerFleetFlags(fs, &fleet)
			pipeline.register(fs)
			return func(ctx context.Context, _ []string, stdout io.Writer, logger *slog.Logger) error {
				cfg := pipeline.config
				cfg.Readings, cfg.Sensors, cfg.ChangeRate = fleet.Readings, fleet.Sensors, fleet.ChangeRate
				return runBenchPipeline(ctx, all, cfg, pipeline, stdout, logger)
			}
		},
	}
}

// runBenchIngest runs the ingest benchmark on private stores made next to the
// configured ones and migrated (dropped afterwards, unless --keep-stores), as
// bench pipeline does: it works on a fresh machine, and its fleet of sensors
// and their states never land in a deployment's registry.
func runBenchIngest(ctx context.Context, node *nodeSettings, ingest bench.IngestConfig, keepStores bool, stdout io.Writer,
	logger *slog.Logger) (err error) {
	cfg, stop, err := benchStream(ctx, node.Stream, logger)
	if err != nil {
		return err
	}
	defer stop()
	ingest.Stream = cfg
	scratch, dropScratch, err := newBenchScratch(ctx, node, "ingest", keepStores, logger)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch()) }()
	pg, err := storage.OpenPostgres(ctx, scratch.PostgresURL)
	if err != nil {
		return err
	}
	defer pg.Close()
	ch, err := storage.OpenClickHouse(ctx, scratch.ClickHouseURL)
	if err != nil {
		return err
	}
	defer ch.Close()
	ingest.History = history.NewClickHouseStore(ch)
	_, err = bench.Ingest(ctx, ingest, bench.NewPostgresStore(pg), logger, stdout)
	return err
}

// benchStream is the Kafka config of a benchmark: the configured brokers, or, with
// none configured, an embedded broker of the benchmark's own on a free port with
// its log in a temporary folder, which stop closes and removes. A benchmark
// measures lockstream, not a broker some other process is feeding.
func benchStream(ctx context.Context, cfg stream.Config, logger *slog.Logger) (stream.Config, func(), error) {
	partitions := cfg.Partitions
	if len(cfg.Brokers) > 0 {
		return cfg, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "lockstream-bench-kafka-")
	if err != nil {
		return stream.Config{}, nil, fmt.Errorf("bench: embedded broker folder: %w", err)
	}
	broker, err := stream.StartEmbedded(ctx, dir, "127.0.0.1:0", partitions)
	if err != nil {
		_ = os.RemoveAll(dir)
		return stream.Config{}, nil, fmt.Errorf("bench: %w", err)
	}
	cfg.Brokers = broker.Addrs()
	logger.Info("no LOCKSTREAM_KAFKA_BROKERS: the benchmark runs on an embedded broker of its own",
		"addr", strings.Join(cfg.Brokers, ","), "dir", dir)
	return cfg, func() {
		broker.Close()
		_ = os.RemoveAll(dir)
	}, nil
}

// statsBox prints, every LOCKSTREAM_STATS_INTERVAL, how fast readings, changes,
// rejections and notifications go through this process: the demo's view of the
// pipeline.
type statsBox struct {
	statsSettings
	out io.Writer
}

func (b statsBox) daemon(_ context.Context, n *node) (daemon, error) {
	return daemon{name: "stats", run: func(ctx context.Context) error {
		if b.Interval <= 0 {
			<-ctx.Done()
			return nil
		}
		return printStats(ctx, n.reg, b.Interval, b.out)
	}}, nil
}

// statColumn is a counter printStats shows: per second when its label ends in /s,
// else as the increase since the last line.
type statColumn struct{ label, metric string }

// statColumns are the counters printStats shows.
func statColumns() []statColumn {
	return []statColumn{
		{"readings/s", "lockstream_readings_consumed_total"},
		// Readings the bridges took in (counted again in readings/s once consumed).
		{"via mqtt/s", "lockstream_mqtt_produced_total"},
		{"via amqp/s", "lockstream_amqp_produced_total"},
		{"changes/s", "lockstream_readings_changed_total"},
		{"dlq/s", "lockstream_readings_rejected_total"},
		{"history rows/s", "lockstream_history_rows_written_total"},
		{"lost", "lockstream_heartbeat_lost_total"},
		{"restored", "lockstream_heartbeat_restored_total"},
		{"notifications", "lockstream_notifications_created_total"},
		{"delivered", `lockstream_deliveries_total{outcome="sent"}`},
		{"pushed", `lockstream_swrve_sends_total{outcome="sent"}`},
		// Escalations put in the outbox: emails and pushes about unseen messages.
		{"escalated", "lockstream_escalations_total"},
	}
}

func printStats(ctx context.Context, g prometheus.Gatherer, interval time.Duration, out io.Writer) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	last, err := counterTotals(g)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		now, err := counterTotals(g)
		if err != nil {
			return err
		}
		var b strings.Builder
		b.WriteString(time.Now().Format("15:04:05"))
		for _, c := range statColumns() {
			delta := now[c.metric] - last[c.metric]
			if strings.HasSuffix(c.label, "/s") {
				fmt.Fprintf(&b, "  %s %.0f", c.label, delta/interval.Seconds())
			} else {
				fmt.Fprintf(&b, "  %s +%.0f", c.label, delta)
			}
		}
		fmt.Fprintln(out, b.String())
		last = now
	}
}

// counterTotals sums every counter of the registry by metric name, over its labels,
// and by name and one label pair (`name{label="value"}`).
func counterTotals(g prometheus.Gatherer) (map[string]float64, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering metrics: %w", err)
	}
	totals := make(map[string]float64, len(families))
	for _, f := range families {
		if f.GetType() != dto.MetricType_COUNTER {
			continue
		}
		for _, m := range f.GetMetric() {
			value := m.GetCounter().GetValue()
			totals[f.GetName()] += value
			for _, l := range m.GetLabel() {
				totals[fmt.Sprintf("%s{%s=%q}", f.GetName(), l.GetName(), l.GetValue())] += value
			}
		}
	}
	return totals, nil
}
