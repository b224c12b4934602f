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
	"net"
	"os"
	"runtime/pprof"
	"time"

	"github.com/lockstream/lockstream/bench"
	"github.com/lockstream/lockstream/migrations"
	"github.com/lockstream/lockstream/registry/secretbox"
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
		"sensors watched by the benchmark's client (their changes become webhooks to its sink)")
	fs.Float64Var(&p.config.LatencyRate, "latency-rate", bench.DefaultPipelineLatencyRate,
		"changes per second of the latency phase")
	fs.DurationVar(&p.config.LatencyDuration, "latency-duration", bench.DefaultPipelineLatencyDuration,
		"how long the latency phase produces")
	fs.DurationVar(&p.config.Timeout, "timeout", bench.DefaultPipelineTimeout, "the longest the whole run may take")
	fs.IntVar(&p.config.Clients, "clients", bench.DefaultPipelineClients,
		"clients the linked sensors are shared among (sensor i to client i mod clients), each with a sink of its own")
	fs.IntVar(&p.config.FailingClients, "failing-clients", 0,
		"how many of the clients answer 500 from the second webhook phase on; the healthy clients' webhooks/s is reported beside the all-healthy figure")
	fs.BoolVar(&p.config.Posts, "posts", false,
		"measure latency as users produce it instead: --history webhooks delivered first, then --latency-rate single-reading POST /v1/readings requests a second for --latency-duration")
	fs.IntVar(&p.config.History, "history", bench.DefaultPipelineHistory,
		"with --posts: webhooks delivered (whole-fleet flips, round after round) before the posts")
	fs.StringVar(&p.cpuProfile, "cpuprofile", "", "write a CPU profile of the process (every daemon, the load and the sink) here")
	fs.BoolVar(&p.keepStores, "keep-stores", false,
		"keep the private databases afterwards (their names are logged), to look into where the time went")
}

// runBenchPipeline runs `lockstream all`'s daemons — the same startAll — on
// private databases made next to the configured ones (dropped afterwards), a data
// folder of their own and, with no brokers configured, an embedded broker on a
// free port, and measures them with bench.Pipeline.
func runBenchPipeline(ctx context.Context, all *allSettings, cfg bench.PipelineConfig, flags pipelineFlags, stdout io.Writer,
	logger *slog.Logger) (err error) {
	scratch, dropScratch, err := newBenchScratch(ctx, &all.Node, "pipeline", flags.keepStores, logger)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch()) }()
	dir, err := os.MkdirTemp("", "lockstream-bench-pipeline-")
	if err != nil {
		return fmt.Errorf("bench pipeline: data folder: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := benchPipelineSettings(all, scratch, dir); err != nil {
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
	statements := &storage.StatementCounter{Batches: true}
	all.Node.statements = statements
	cfg.Webhook, cfg.Workers = all.Retrier.Webhook, all.Retrier.Retrier.Workers
	run := func(ctx context.Context, ready func(bench.PipelineNode)) error {
		return startAll(ctx, all, io.Discard, logger, "127.0.0.1:0", func(n *node) {
			ready(bench.PipelineNode{Stream: n.stream, Metrics: n.reg, Store: bench.NewPostgresStore(n.pg),
				Statements: statements.Count, APIURL: "http://" + all.API.API.Addr, IngestToken: all.API.API.IngestToken})
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
func newBenchScratch(ctx context.Context, node *nodeSettings, name string, keep bool, logger *slog.Logger) (
	scratch *storage.ScratchStores, drop func() error, err error) {
	scratch, err = storage.NewScratchStores(ctx, node.PGURL, node.ClickHouseURL, node.RedisURL, node.RedisPrefix)
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
// (known beforehand, for the posts mode) with tokens of its own, webhooks
// allowed to the loopback sink, a fresh signing-secret key, and fresh topics
// when brokers are given.
func benchPipelineSettings(all *allSettings, scratch *storage.ScratchStores, dir string) error {
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	ingest := make([]byte, 16)
	_, _ = rand.Read(ingest)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("bench pipeline: a free port for the API: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return fmt.Errorf("bench pipeline: a free port for the API: %w", err)
	}
	all.Node.PGURL = scratch.PostgresURL
	all.Node.ClickHouseURL = scratch.ClickHouseURL
	all.Node.RedisPrefix = scratch.RedisPrefix
	all.Node.DataDir = dir
	all.Node.SecretKey = secretbox.NewKey()
	all.API.API.Addr = addr
	all.API.API.AdminToken = hex.EncodeToString(token)
	all.API.API.IngestToken = hex.EncodeToString(ingest)
	all.Retrier.Webhook.AllowPrivate = true
	all.Stats.Interval = 0
	// The benchmark's node stops once it has measured: nobody routes to it.
	all.Shutdown.Delay = 0
	all.API.AMQP.URL = ""
	all.Bridge.AMQP.URL = ""
	all.Bridge.MQTT.URL = ""
	if len(all.Node.Stream.Brokers) > 0 {
		all.Node.Stream.TopicPrefix += "bench" + hex.EncodeToString(token[:4]) + "."
	}
	return nil
}
