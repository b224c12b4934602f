package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	"github.com/lockstream/lockstream/bench"
	"github.com/lockstream/lockstream/migrations"
	"github.com/lockstream/lockstream/storage"
)

// pipelineFlags are `lockstream bench pipeline`'s own flags.
type pipelineFlags struct {
	config     bench.PipelineConfig
	cpuProfile string
	keepStores bool
}

func (p *pipelineFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&p.config.Linked, "linked", bench.DefaultPipelineLinked,
		"pipeline: sensors watched by the benchmark's client (their changes become webhooks to its sink)")
	fs.Float64Var(&p.config.LatencyRate, "latency-rate", bench.DefaultPipelineLatencyRate,
		"pipeline: changes per second of the latency phase")
	fs.DurationVar(&p.config.LatencyDuration, "latency-duration", bench.DefaultPipelineLatencyDuration,
		"pipeline: how long the latency phase produces")
	fs.DurationVar(&p.config.Timeout, "timeout", bench.DefaultPipelineTimeout, "pipeline: the longest the whole run may take")
	fs.StringVar(&p.cpuProfile, "cpuprofile", "", "pipeline: write a CPU profile of the process (every daemon, the load and the sink) here")
	fs.BoolVar(&p.keepStores, "keep-stores", false,
		"keep the private databases afterwards (their names are logged), to look into where the time went")
}

// runBenchPipeline runs `lockstream all`'s daemons — the same startAll — on
// private databases made next to the configured ones (dropped afterwards), a data
// folder of their own and, with no brokers configured, an embedded broker on a
// free port, and measures them with bench.Pipeline.
func runBenchPipeline(ctx context.Context, v *values, cfg bench.PipelineConfig, flags pipelineFlags, stdout io.Writer,
	logger *slog.Logger) (err error) {
	scratch, dropScratch, err := newBenchScratch(ctx, v, "pipeline", flags.keepStores, logger)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch()) }()
	dir, err := os.MkdirTemp("", "lockstream-bench-pipeline-")
	if err != nil {
		return fmt.Errorf("bench pipeline: data folder: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := benchPipelineSettings(v, scratch, dir); err != nil {
		return err
	}
	if flags.cpuProfile != "" {
		f, err := os.Create(flags.cpuProfile)
		if err != nil {
			return fmt.Errorf("bench pipeline: %w", err)
		}
		defer func() { _ = f.Close() }()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench pipeline: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	run := func(ctx context.Context, ready func(bench.PipelineNode)) error {
		return startAll(ctx, v, io.Discard, logger, "127.0.0.1:0", func(n *node) {
			ready(bench.PipelineNode{Stream: n.stream, Metrics: n.reg, Store: bench.NewPostgresStore(n.pg)})
		})
	}
	res, err := bench.Pipeline(ctx, cfg, run, logger, stdout)
	if err != nil {
		return err
	}
	return res.Check()
}

// newBenchScratch makes a benchmark's private stores next to the configured ones
// and migrates them, so a benchmark runs on a fresh machine (an unmigrated
// database, no ClickHouse database yet) and leaves the configured stores as they
// were. drop removes them, unless keep: then it logs their names.
func newBenchScratch(ctx context.Context, v *values, name string, keep bool, logger *slog.Logger) (
	scratch *storage.ScratchStores, drop func() error, err error) {
	scratch, err = storage.NewScratchStores(ctx, v.str("pg-url"), v.str("clickhouse-url"), v.str("redis-url"), v.str("redis-prefix"))
	if err != nil {
		return nil, nil, fmt.Errorf("bench %s: %w", name, err)
	}
	drop = func() error {
		if keep {
			logger.Info("bench "+name+": private stores kept", "postgres", scratch.PostgresURL,
				"clickhouse", scratch.ClickHouseURL, "redis_prefix", scratch.RedisPrefix)
			return nil
		}
		// The run's context may be cancelled (an interrupt): the drop still runs.
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := scratch.Drop(dropCtx); err != nil {
			return fmt.Errorf("bench %s: %w", name, err)
		}
		return nil
	}
	if err := migrations.Migrate(ctx, scratch.PostgresURL, scratch.ClickHouseURL, logger); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("bench %s: migrating the private stores: %w", name, err), drop())
	}
	return scratch, drop, nil
}

// benchPipelineSettings points the daemons' settings at the scratch stores and
// the data folder, and sets what the benchmark needs: an API on a free port
// with tokens of its own, webhooks allowed to the loopback sink, a fresh
// signing-secret key, and fresh topics when brokers are given.
func benchPipelineSettings(v *values, scratch *storage.ScratchStores, dir string) error {
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	v.set("pg-url", scratch.PostgresURL)
	v.set("clickhouse-url", scratch.ClickHouseURL)
	v.set("redis-prefix", scratch.RedisPrefix)
	v.set("data-dir", dir)
	v.set("http-addr", "127.0.0.1:0")
	v.set("admin-token", hex.EncodeToString(token))
	v.set("secret-key", storage.NewSecretKey())
	v.set("webhook-allow-private", "true")
	v.set("stats-interval", "0")
	v.set("metrics-addr", "")
	v.set("amqp-url", "")
	v.set("mqtt-url", "")
	if len(v.list("kafka-brokers")) > 0 {
		v.set("kafka-topic-prefix", v.str("kafka-topic-prefix")+"bench"+hex.EncodeToString(token[:4])+".")
	}
	return nil
}
