package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/maintain"
	"github.com/lockstream/lockstream/migrations"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/webapi"
)

// command is one subcommand: the settings it reads and how it runs.
type command struct {
	name    string
	summary string
	// args names the command's arguments in its usage line (" <benchmark>"); most
	// take none.
	args     string
	settings []string
	// flags registers the command's own flags, beyond its settings; may be nil.
	flags func(fs *flag.FlagSet)
	run   func(ctx context.Context, v *values, stdout io.Writer, logger *slog.Logger) error
}

// commands is the table of subcommands; `all` runs every daemon of the table in one
// process. It is one long literal, an entry a subcommand, so that every subcommand
// and the settings it takes read in one place.
func commands() []command {
	storeSettings := []string{"pg-url", "redis-url", "redis-prefix", "clickhouse-url", "metrics-addr", "shutdown-delay", "shutdown-timeout"}
	kafkaSettings := []string{"kafka-brokers", "kafka-partitions", "kafka-topic-prefix"}
	apiSettings := []string{"http-addr", "admin-token", "ingest-token", "push-token",
		"http-read-timeout", "http-write-timeout", "http-idle-timeout", "secret-key", "secret-overlap", "data-dir",
		"amqp-url", "amqp-exchange", "new-member-window", "retention"}
	heartbeatSettings := []string{"heartbeat-timeout", "heartbeat-sweep-interval", "site-outage-min", "site-hold",
		"flap-changes", "flap-window"}
	return []command{
		{
			name:     "migrate",
			summary:  "apply the embedded Postgres and ClickHouse migrations, then exit",
			settings: []string{"pg-url", "clickhouse-url"},
			run: func(ctx context.Context, v *values, _ io.Writer, logger *slog.Logger) error {
				return migrations.Migrate(ctx, v.str("pg-url"), v.str("clickhouse-url"), logger)
			},
		},
		{
			name:     "api",
			summary:  "serve the HTTP API (admin, history, ingest, health, metrics)",
			settings: concat(apiSettings, heartbeatSettings, storeSettings, kafkaSettings),
			run:      runDaemonsCommand(usesPostgres|usesRedis|usesClickHouseLazily|usesSecretKey, apiDaemon),
		},
		{
			name:     "consume",
			summary:  "the state consumer: readings → sensor state, change events, DLQ, heartbeat sightings",
			settings: concat(heartbeatSettings, storeSettings, kafkaSettings),
			run:      runDaemonsCommand(usesPostgres|usesRedis, metricsDaemon, consumerDaemon),
		},
		{
			name:     "history",
			summary:  "the history writer: readings and events → ClickHouse",
			settings: concat(storeSettings, kafkaSettings),
			run:      runDaemonsCommand(usesClickHouse, metricsDaemon, historyDaemon),
		},
		{
			name:     "heartbeat",
			summary:  "the heartbeat daemon: silent sensors → connection_lost",
			settings: concat(heartbeatSettings, storeSettings, kafkaSettings),
			run:      runDaemonsCommand(usesAll, metricsDaemon, heartbeatDaemon),
		},
		{
			name:     "fanout",
			summary:  "the fan-out: events → one notification and delivery per linked client and channel (the outbox)",
			settings: concat([]string{"fanout-writers"}, storeSettings, kafkaSettings),
			run:      runDaemonsCommand(usesPostgres, metricsDaemon, inboxPartitionsDaemon, fanoutDaemon),
		},
		{
			name:    "retrier",
			summary: "the retrier: due deliveries → webhooks, email and Swrve pushes, with logarithmic back-off",
			settings: concat([]string{"retry-max-attempts", "retry-backoff-base", "retry-lease", "retry-workers",
				"webhook-endpoint-concurrency", "webhook-allow-private", "smtp-url",
				"endpoint-disable-after", "endpoint-disable-min-failures",
				"swrve-url", "swrve-rate", "swrve-push-keys", "secret-key", "data-dir"},
				storeSettings, kafkaSettings),
			run: runDaemonsCommand(usesPostgres|usesRedis|usesClickHouse|usesSecretKey, metricsDaemon, retrierDaemon),
		},
		{
			name:     "maintain",
			summary:  "keep the stores bounded: month partitions made ahead, whole months dropped past the retention",
			settings: concat([]string{"retention", "history-retention", "maintain-interval"}, storeSettings, kafkaSettings),
			run:      runDaemonsCommand(usesPostgres|usesClickHouse, metricsDaemon, maintainDaemon),
		},
		{
			name:     "escalation",
			summary:  "escalate unseen messages: an email and a push per episode left unseen, digests (into the outbox)",
			settings: concat([]string{"escalation-interval", "escalate-email-after", "escalate-push-after", "escalation-limit"}, storeSettings, kafkaSettings),
			run:      runDaemonsCommand(usesPostgres, metricsDaemon, escalationDaemon),
		},
		{
			name:     "bridge",
			summary:  "the intake bridges: AMQP (RabbitMQ) and MQTT (Mosquitto) messages → readings on Kafka, acknowledged once Kafka has them",
			settings: concat(bridgeSettings, []string{"pg-url", "metrics-addr", "shutdown-delay", "shutdown-timeout"}, kafkaSettings),
			// Postgres: free-form notifications over AMQP go into members' inboxes.
			run: runDaemonsCommand(usesPostgres, metricsDaemon, bridgeDaemon),
		},
		simulateCommand(kafkaSettings),
		benchCommand(),
		{
			name:     "fake-swrve",
			summary:  "a stand-in for Swrve's push API: measured latencies, 429 above 300 starts/s (tests, demo)",
			settings: []string{"fake-swrve-addr", "fake-swrve-scale"},
			run:      runFakeSwrve,
		},
		{
			name:     "webhook-sink",
			summary:  "receive webhooks, verify their signatures and print them, and email over SMTP (the demo's client system and mailbox)",
			settings: []string{"sink-addr", "sink-secret", "sink-smtp-addr"},
			run:      runSink,
		},
		{
			name:     "all",
			summary:  "migrate, then run every daemon in one process (single node, demo)",
			settings: daemonSettingNames(),
			run:      runAll,
		},
	}
}

// closeBoth returns a close that runs a (when not nil), then b.
func closeBoth(a, b func()) func() {
	if a == nil {
		return b
	}
	return func() { a(); b() }
}

func concat(groups ...[]string) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// node is what the daemons of one process share: stores, the Kafka config, one
// metrics registry.
type node struct {
	v      *values
	logger *slog.Logger
	reg    *prometheus.Registry
	stream stream.Config

	pg    *storage.Postgres
	redis *storage.Redis
	ch    *storage.ClickHouse

	// tracker is shared by the consumer and the API; see heartbeatTracker.
	tracker *heartbeat.Tracker
	// probe pings the open stores for lockstream_store_up.
	probe *storeProbe
	// health serves GET /healthz and GET /readyz (on the API's address or the
	// metrics address); the shutdown drains it before anything stops.
	health *webapi.Health
	// abandoned is set when the shutdown timed out with daemons still running:
	// then nothing they hold is closed (closing would wait for them).
	abandoned bool
	// ready, when not nil, is called by run once every daemon is built.
	ready func(*node)
}

// storeSet says which stores a command's daemons use.
type storeSet uint8

// The stores a node may open.
const (
	usesPostgres storeSet = 1 << iota
	usesRedis
	usesClickHouse
	// usesClickHouseLazily opens ClickHouse without waiting for it: the API
	// starts and serves while it is down, its history routes answering 503.
	usesClickHouseLazily
	// usesSecretKey opens Postgres with the key of client signing secrets (see
	// secretBox): for the daemons that store or send them.
	usesSecretKey
	usesAll = usesPostgres | usesRedis | usesClickHouse
)

// openNode connects to the stores in need, and only to those, so that one store's
// outage does not keep a daemon that never touches it from starting (the state
// consumer must run while ClickHouse is down). Kafka is connected to by each daemon.
func openNode(ctx context.Context, v *values, logger *slog.Logger, need storeSet) (*node, error) {
	partitions, err := v.int("kafka-partitions")
	if err != nil {
		return nil, err
	}
	n := &node{v: v, logger: logger, reg: newRegistry(),
		stream: stream.Config{Brokers: v.list("kafka-brokers"), Partitions: partitions, TopicPrefix: v.str("kafka-topic-prefix")}}
	if need&usesPostgres != 0 {
		var opts []storage.PostgresOption
		if need&usesSecretKey != 0 {
			box, err := secretBox(v, logger)
			if err != nil {
				return nil, err
			}
			opts = append(opts, storage.WithSecretBox(box))
		}
		if n.pg, err = storage.OpenPostgres(ctx, v.str("pg-url"), opts...); err != nil {
			return nil, err
		}
	}
	if need&usesRedis != 0 {
		if n.redis, err = storage.OpenRedis(ctx, v.str("redis-url"), v.str("redis-prefix")); err != nil {
			n.close()
			return nil, err
		}
	}
	switch {
	case need&usesClickHouse != 0:
		if n.ch, err = storage.OpenClickHouse(ctx, v.str("clickhouse-url")); err != nil {
			n.close()
			return nil, err
		}
	case need&usesClickHouseLazily != 0:
		if n.ch, err = storage.OpenClickHouseLazy(v.str("clickhouse-url")); err != nil {
			n.close()
			return nil, err
		}
		if err := n.ch.Ping(ctx); err != nil {
			logger.Warn("ClickHouse is unreachable; serving without history until it is back", "err", err)
		}
	}
	n.probe = newStoreProbe(n)
	n.reg.MustRegister(n.probe)
	checks := make(map[string]webapi.Pinger, len(n.probe.stores))
	for name, store := range n.probe.stores {
		checks[name] = store
	}
	n.health = webapi.NewHealth(checks, storePingTimeout, logger)
	return n, nil
}

// close releases the stores in reverse order of opening, unless the shutdown
// abandoned daemons that still use them.
func (n *node) close() {
	if n.abandoned {
		return
	}
	if n.ch != nil {
		_ = n.ch.Close()
	}
	if n.redis != nil {
		_ = n.redis.Close()
	}
	if n.pg != nil {
		n.pg.Close()
	}
}

// requireBrokers explains what to do when a daemon that needs Kafka has none.
func (n *node) requireBrokers() error {
	if len(n.stream.Brokers) == 0 {
		return errors.New("LOCKSTREAM_KAFKA_BROKERS / --kafka-brokers is required here (only `lockstream all` embeds a broker)")
	}
	return nil
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// daemon is one long-running part of a process.
type daemon struct {
	name string
	run  func(ctx context.Context) error
	// close releases what the daemon holds once every daemon of the process stopped.
	close func()
}

// daemonFactory builds a daemon on a node.
type daemonFactory func(ctx context.Context, n *node) (daemon, error)

// runDaemonsCommand returns a command that opens the stores in need and runs the
// daemons the factories build.
func runDaemonsCommand(need storeSet, factories ...daemonFactory) func(context.Context, *values, io.Writer, *slog.Logger) error {
	return func(ctx context.Context, v *values, _ io.Writer, logger *slog.Logger) error {
		n, err := openNode(ctx, v, logger, need)
		if err != nil {
			return err
		}
		defer n.close()
		return n.run(ctx, factories...)
	}
}

// run builds every daemon in the order given, which is their start order (what a
// daemon needs starts before it; the process's metrics and probes first, intake
// last), then runs them until ctx ends or one fails, and stops them in reverse
// order (see runInOrder): the first failure stops the others and is reported with
// the daemon's name.
func (n *node) run(ctx context.Context, factories ...daemonFactory) error {
	if len(n.stream.Brokers) > 0 {
		if err := n.ensureTopics(ctx); err != nil {
			return err
		}
	}
	var daemons []daemon
	defer func() {
		if n.abandoned {
			return
		}
		for i := len(daemons) - 1; i >= 0; i-- {
			if daemons[i].close != nil {
				daemons[i].close()
			}
		}
	}()
	for _, f := range factories {
		d, err := f(ctx, n)
		if err != nil {
			return err
		}
		daemons = append(daemons, d)
	}
	if n.ready != nil {
		n.ready(n)
	}
	plan, err := n.shutdownPlan()
	if err != nil {
		return err
	}
	err = runInOrder(ctx, daemons, plan, n.logger)
	if errors.Is(err, errShutdownTimeout) {
		// Daemons still run: closing what they hold would wait for them.
		n.abandoned = true
	}
	return err
}

// shutdownPlan is how the node's daemons stop, from its settings.
func (n *node) shutdownPlan() (shutdown, error) {
	delay, err := n.v.duration("shutdown-delay")
	if err != nil {
		return shutdown{}, err
	}
	timeout, err := n.v.duration("shutdown-timeout")
	if err != nil {
		return shutdown{}, err
	}
	if delay < 0 || timeout <= 0 {
		return shutdown{}, fmt.Errorf("LOCKSTREAM_SHUTDOWN_DELAY (%v) must be 0 or more and LOCKSTREAM_SHUTDOWN_TIMEOUT (%v) more than 0", delay, timeout)
	}
	return shutdown{delay: delay, timeout: timeout, drain: n.health.Drain}, nil
}

// ensureTopics creates lockstream's topics where they are missing, so a fresh
// cluster works without manual set-up.
func (n *node) ensureTopics(ctx context.Context) error {
	client, err := kgo.NewClient(append(stream.ClientOpts(n.stream), stream.WithLogger(n.logger))...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer client.Close()
	return stream.EnsureTopics(ctx, client, n.stream)
}

// apiDaemon serves the HTTP API, with ingest when Kafka is configured.
func apiDaemon(ctx context.Context, n *node) (daemon, error) {
	token := n.v.str("admin-token")
	if token == "" {
		return daemon{}, errors.New("LOCKSTREAM_ADMIN_TOKEN / --admin-token is required: the admin API has no other protection")
	}
	// Secrets stored before they were encrypted at rest are encrypted now; until
	// then (and should this fail) they are read as they are.
	if encrypted, err := n.pg.EncryptPlaintextSecrets(ctx); err != nil {
		n.logger.Warn("encrypting client secrets stored in plaintext failed; they stay readable and are tried again at the next start",
			"err", err)
	} else if encrypted > 0 {
		n.logger.Info("encrypted client secrets stored in plaintext", "clients", encrypted)
	}
	tracker, err := n.heartbeatTracker()
	if err != nil {
		return daemon{}, err
	}
	con, err := newConsole(n, token, tracker)
	if err != nil {
		return daemon{}, err
	}
	inboxCfg, err := inboxConfig(n.v)
	if err != nil {
		return daemon{}, err
	}
	a := n.analytics()
	opts := []webapi.Option{webapi.WithHealth(n.health), webapi.WithHistory(a), webapi.WithAnalytics(a), webapi.WithDeliveries(n.pg, n.pg), webapi.WithClientEvents(n.pg), webapi.WithMaintenance(n.heartbeatStores().Postgres), webapi.WithPushes(n.pg, n.pg),
		webapi.WithSensorStatus(tracker),
		webapi.WithSensorObserver(tracker), webapi.WithLostSensors(tracker), webapi.WithConsole(con.Handler()),
		webapi.WithInbox(n.pg, n.pg, n.redis, inboxCfg), webapi.WithUnregistered(consumer.NewPostgresStore(n.pg))}
	retention, err := maintain.ParseRetention(n.v.str("retention"))
	if err != nil {
		return daemon{}, fmt.Errorf("--retention: %w", err)
	}
	opts = append(opts, webapi.WithDeliveryControls(n.pg, retention))
	d := daemon{name: "api"}
	publisher, err := n.notificationPublisher()
	if err != nil {
		return daemon{}, err
	}
	if publisher != nil {
		opts = append(opts, webapi.WithNotificationPublisher(publisher))
		d.close = publisher.Close
	}
	if len(n.stream.Brokers) > 0 {
		client, err := kgo.NewClient(append(stream.ClientOpts(n.stream), stream.WithLogger(n.logger),
			stream.ClientMetrics(n.reg, "api"))...)
		if err != nil {
			return daemon{}, fmt.Errorf("api: kafka client: %w", err)
		}
		d.close = closeBoth(d.close, client.Close)
		opts = append(opts, webapi.WithReadingPublisher(stream.NewReadingPublisher(n.stream, client)))
	}
	cfg, err := n.apiConfig()
	if err != nil {
		if d.close != nil {
			d.close()
		}
		return daemon{}, err
	}
	srv, err := webapi.New(cfg, n.pg, nil, n.reg, n.reg, n.logger, opts...)
	if err != nil {
		if d.close != nil {
			d.close()
		}
		return daemon{}, err
	}
	d.run = func(ctx context.Context) error {
		// The console's Run ends its live streams when ctx ends, so the server's
		// shutdown does not wait for them.
		g, ctx := errgroup.WithContext(ctx)
		g.Go(func() error { return con.Run(ctx) })
		g.Go(func() error { return srv.Run(ctx) })
		return g.Wait()
	}
	return d, nil
}

// apiConfig is the HTTP API's configuration from the node's settings.
func (n *node) apiConfig() (webapi.Config, error) {
	cfg := webapi.Config{Addr: n.v.str("http-addr"), AdminToken: n.v.str("admin-token"),
		IngestToken: n.v.str("ingest-token"), PushToken: n.v.str("push-token")}
	var err error
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{
		{"secret-overlap", &cfg.SecretOverlap},
		{"http-read-timeout", &cfg.ReadTimeout},
		{"http-write-timeout", &cfg.WriteTimeout},
		{"http-idle-timeout", &cfg.IdleTimeout},
	} {
		if *d.dst, err = n.v.duration(d.name); err != nil {
			return webapi.Config{}, err
		}
	}
	return cfg, nil
}

func consumerDaemon(_ context.Context, n *node) (daemon, error) {
	if err := n.requireBrokers(); err != nil {
		return daemon{}, err
	}
	tracker, err := n.heartbeatTracker()
	if err != nil {
		return daemon{}, err
	}
	flapChanges, err := n.v.int("flap-changes")
	if err != nil {
		return daemon{}, err
	}
	flapWindow, err := n.v.duration("flap-window")
	if err != nil {
		return daemon{}, err
	}
	store := consumer.NewPostgresStore(n.pg)
	c, err := consumer.New(consumer.Config{Stream: n.stream, FlapChanges: flapChanges, FlapWindow: flapWindow},
		consumer.Deps{States: store, Sightings: tracker, Unregistered: store}, n.reg, n.logger.With("daemon", "consumer"))
	if err != nil {
		return daemon{}, err
	}
	return daemon{name: "consumer", run: c.Run}, nil
}

func historyDaemon(_ context.Context, n *node) (daemon, error) {
	if err := n.requireBrokers(); err != nil {
		return daemon{}, err
	}
	h, err := history.New(history.Config{Stream: n.stream}, history.NewClickHouseStore(n.ch), n.reg, n.logger.With("daemon", "history"))
	if err != nil {
		return daemon{}, err
	}
	return daemon{name: "history", run: h.Run}, nil
}

// metricsDaemon serves /metrics, /healthz and /readyz (a ping of every store the
// process uses) on LOCKSTREAM_METRICS_ADDR for processes without the API; with no
// address it does nothing.
func metricsDaemon(_ context.Context, n *node) (daemon, error) {
	addr := n.v.str("metrics-addr")
	if addr == "" {
		return daemon{name: "metrics", run: func(ctx context.Context) error { <-ctx.Done(); return nil }}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{Registry: n.reg}))
	mux.HandleFunc("GET /healthz", n.health.Healthz)
	mux.HandleFunc("GET /readyz", n.health.Readyz)
	return daemon{name: "metrics", run: func(ctx context.Context) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		n.logger.Info("serving metrics", "addr", ln.Addr().String())
		return serveUntilDone(ctx, &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln)
	}}, nil
}

func runAll(ctx context.Context, v *values, stdout io.Writer, logger *slog.Logger) error {
	return startAll(ctx, v, stdout, logger, embeddedBrokerAddr, nil)
}

// startAll is `lockstream all`: it migrates, opens every store, starts the
// embedded broker on brokerAddr when no brokers are configured, and runs every
// daemon until ctx ends. ready, when not nil, is called once the daemons are
// built, just before they run (`lockstream bench pipeline` starts its load
// then).
func startAll(ctx context.Context, v *values, stdout io.Writer, logger *slog.Logger, brokerAddr string, ready func(*node)) error {
	if err := migrations.Migrate(ctx, v.str("pg-url"), v.str("clickhouse-url"), logger); err != nil {
		return err
	}
	n, err := openNode(ctx, v, logger, usesAll|usesSecretKey)
	if err != nil {
		return err
	}
	defer n.close()
	if len(n.stream.Brokers) == 0 {
		dir := filepath.Join(v.str("data-dir"), "kafka")
		broker, err := stream.StartEmbedded(ctx, dir, brokerAddr, n.stream.Partitions)
		if err != nil {
			return err
		}
		defer func() {
			if !n.abandoned {
				broker.Close()
			}
		}()
		n.stream.Brokers = broker.Addrs()
		logger.Info("embedded Kafka broker started", "addr", n.stream.Brokers, "dir", dir)
	}
	// Start order: what reads the stores only, then what turns events into
	// deliveries and history, then the state consumer, then intake (bridges,
	// then the API, whose listener also serves the probes). They stop in
	// reverse: intake first, then each stage drains what it holds while the
	// stages after it still run.
	daemons := []daemonFactory{statsDaemon(stdout), maintainDaemon, inboxPartitionsDaemon, escalationDaemon, retrierDaemon,
		fanoutDaemon, historyDaemon, heartbeatDaemon, consumerDaemon}
	if bridgesConfigured(v) {
		daemons = append(daemons, bridgeDaemon)
	}
	daemons = append(daemons, apiDaemon)
	n.ready = ready
	return n.run(ctx, daemons...)
}

// embeddedBrokerAddr is where `all` serves its embedded broker, so kcat and
// `lockstream simulate` find it without configuration.
const embeddedBrokerAddr = "127.0.0.1:9092"
