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

	"github.com/lockstream/lockstream/bridge/amqp"
	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/incident"
	"github.com/lockstream/lockstream/internal/settings"
	"github.com/lockstream/lockstream/maintain"
	"github.com/lockstream/lockstream/migrations"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/webapi"
	"github.com/lockstream/lockstream/webapi/live"
)

// command is one subcommand: the settings it reads and how it runs.
type command struct {
	name    string
	summary string
	// args names the command's arguments in its usage line (" <benchmark>"); most
	// take none.
	args string
	// setup declares the command's settings on s — those of the boxes it runs, and
	// only those — and its own flags on fs, and returns how it runs once they are
	// parsed. The runner reads the fields its boxes bound, never a name.
	setup func(s *settings.Set, fs *flag.FlagSet) runner
	// subcommands make the command a group (bench): its first argument names
	// one, which runs as a command of its own ("bench ingest") with its own
	// settings; a group has no setup.
	subcommands []command
}

// runner runs a command on its parsed settings; args are its arguments, the flags
// taken out.
type runner func(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error

// commands is the table of subcommands; `all` runs every daemon of the table in one
// process. It is one long literal, an entry a subcommand, so that every subcommand
// and the boxes it runs read in one place.
func commands() []command {
	return []command{
		{
			name:    "migrate",
			summary: "apply the embedded Postgres and ClickHouse migrations, then exit",
			setup: func(s *settings.Set, _ *flag.FlagSet) runner {
				node := &nodeSettings{need: usesPostgres | usesClickHouse}
				s.Register(node)
				return func(ctx context.Context, _ []string, _ io.Writer, logger *slog.Logger) error {
					return migrations.Migrate(ctx, node.PGURL, node.ClickHouseURL, logger)
				}
			},
		},
		{
			name:    "api",
			summary: "serve the HTTP API (admin, history, ingest, health, metrics)",
			setup:   daemonsCommand(usesPostgres|usesRedis|usesClickHouseLazily|usesSecretKey|usesKafka, &apiBox{}),
		},
		{
			name:    "consume",
			summary: "the state consumer: readings → sensor state, change events, DLQ, heartbeat sightings",
			setup:   daemonsCommand(usesPostgres|usesRedis|usesKafka, &metricsBox{}, &consumerBox{}),
		},
		{
			name:    "history",
			summary: "the history writer: readings and events → ClickHouse",
			setup:   daemonsCommand(usesClickHouse|usesKafka, &metricsBox{}, &historyBox{}),
		},
		{
			name:    "heartbeat",
			summary: "the heartbeat daemon: silent sensors → connection_lost",
			setup:   daemonsCommand(usesAll|usesKafka, &metricsBox{}, &heartbeatBox{}),
		},
		{
			name:    "fanout",
			summary: "the fan-out: events → one notification and delivery per linked client and channel (the outbox)",
			setup:   daemonsCommand(usesPostgres|usesKafka, &metricsBox{}, &fanoutBox{}),
		},
		{
			name:    "retrier",
			summary: "the retrier: due deliveries → webhooks, email and Swrve pushes, with logarithmic back-off",
			setup:   daemonsCommand(usesPostgres|usesRedis|usesClickHouse|usesSecretKey, &metricsBox{}, &retrierBox{}),
		},
		{
			name:    "maintain",
			summary: "keep the stores bounded: month partitions made ahead, whole months dropped past the retention",
			setup:   daemonsCommand(usesPostgres|usesClickHouse, &metricsBox{}, &maintainBox{}),
		},
		{
			name:    "escalation",
			summary: "escalate unseen messages: an email and a push per episode left unseen, digests (into the outbox)",
			setup:   daemonsCommand(usesPostgres, &metricsBox{}, &escalationBox{}),
		},
		{
			name:    "bridge",
			summary: "the intake bridges: AMQP (RabbitMQ) and MQTT (Mosquitto) messages → readings on Kafka, acknowledged once Kafka has them",
			// Postgres: free-form notifications over AMQP go into members' inboxes.
			setup: daemonsCommand(usesPostgres|usesKafka, &metricsBox{}, &bridgeBox{}),
		},
		simulateCommand(),
		benchCommand(),
		configCommand(),
		{
			name:    "fake-swrve",
			summary: "a stand-in for Swrve's push API: measured latencies, 429 above 300 starts/s (tests, demo)",
			setup: func(s *settings.Set, _ *flag.FlagSet) runner {
				c := &fakeSwrveSettings{}
				s.Register(c)
				return func(ctx context.Context, _ []string, stdout io.Writer, logger *slog.Logger) error {
					return runFakeSwrve(ctx, c, stdout, logger)
				}
			},
		},
		{
			name:    "webhook-sink",
			summary: "receive webhooks, verify their signatures and print them, and email over SMTP (the demo's client system and mailbox)",
			setup: func(s *settings.Set, _ *flag.FlagSet) runner {
				c := &sinkSettings{}
				s.Register(c)
				return func(ctx context.Context, _ []string, stdout io.Writer, logger *slog.Logger) error {
					return runSink(ctx, c, stdout, logger)
				}
			},
		},
		{
			name:    "all",
			summary: "migrate, then run every daemon in one process (single node, demo)",
			setup: func(s *settings.Set, _ *flag.FlagSet) runner {
				c := newAllSettings()
				s.Register(c)
				return func(ctx context.Context, _ []string, stdout io.Writer, logger *slog.Logger) error {
					return startAll(ctx, c, stdout, logger, embeddedBrokerAddr, nil)
				}
			},
		},
	}
}

// box is one daemon as commands compose it: its settings, declared on the
// command's Set and bound to its fields, and how it is built on a node from them.
type box interface {
	settings.Registrar
	daemon(ctx context.Context, n *node) (daemon, error)
}

// daemonsCommand returns the setup of a command that opens the stores in need and
// runs the boxes' daemons: its settings are the stores' and the boxes', nothing
// else.
func daemonsCommand(need storeSet, boxes ...box) func(*settings.Set, *flag.FlagSet) runner {
	return func(s *settings.Set, _ *flag.FlagSet) runner {
		ns := &nodeSettings{need: need}
		sd := &shutdownSettings{}
		s.Register(ns, sd)
		for _, b := range boxes {
			s.Register(b)
		}
		return func(ctx context.Context, _ []string, _ io.Writer, logger *slog.Logger) error {
			n, err := openNode(ctx, ns, logger)
			if err != nil {
				return err
			}
			defer n.close()
			n.shutdown = *sd
			return n.run(ctx, boxes...)
		}
	}
}

// closeBoth returns a close that runs a (when not nil), then b.
func closeBoth(a, b func()) func() {
	if a == nil {
		return b
	}
	return func() { a(); b() }
}

// node is what the daemons of one process share: stores, the Kafka config, one
// metrics registry.
type node struct {
	cfg    *nodeSettings
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
	// shutdown is how run stops the daemons.
	shutdown shutdownSettings
	// abandoned is set when the shutdown timed out with daemons still running:
	// then nothing they hold is closed (closing would wait for them).
	abandoned bool
	// ready, when not nil, is called by run once every daemon is built.
	ready func(*node)
	// handoff is the retrier of this process, once built, for a fan-out built
	// after it in the same process to hand its deliveries to (`all`).
	handoff fanout.Handoff
	// now is the process's one clock: every box that judges time (what is
	// due, expired, late, which hour or day it is) reads it through its
	// Config's Now. Durations measured for metrics use the monotonic clock
	// directly.
	now func() time.Time
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
	// usesKafka: the process's daemons read or write Kafka.
	usesKafka
	// usesDataDir: the process keeps local state (`all`'s embedded broker).
	usesDataDir
	usesAll = usesPostgres | usesRedis | usesClickHouse
)

// openNode connects to the stores in need, and only to those, so that one store's
// outage does not keep a daemon that never touches it from starting (the state
// consumer must run while ClickHouse is down). Kafka is connected to by each daemon.
func openNode(ctx context.Context, cfg *nodeSettings, logger *slog.Logger) (*node, error) {
	need := cfg.need
	n := &node{cfg: cfg, logger: logger, reg: newRegistry(), stream: cfg.Stream, now: time.Now}
	var err error
	if need&usesPostgres != 0 {
		var opts []storage.PostgresOption
		if need&usesSecretKey != 0 {
			box, err := secretBox(cfg.SecretKey, cfg.DataDir, logger)
			if err != nil {
				return nil, err
			}
			opts = append(opts, storage.WithSecretBox(box))
		}
		if cfg.statements != nil {
			opts = append(opts, storage.WithStatementCounter(cfg.statements))
		}
		if n.pg, err = storage.OpenPostgres(ctx, cfg.PGURL, opts...); err != nil {
			return nil, err
		}
	}
	if need&usesRedis != 0 {
		if n.redis, err = storage.OpenRedis(ctx, cfg.RedisURL, cfg.RedisPrefix); err != nil {
			n.close()
			return nil, err
		}
	}
	switch {
	case need&usesClickHouse != 0:
		if n.ch, err = storage.OpenClickHouse(ctx, cfg.ClickHouseURL); err != nil {
			n.close()
			return nil, err
		}
	case need&usesClickHouseLazily != 0:
		if n.ch, err = storage.OpenClickHouseLazy(cfg.ClickHouseURL); err != nil {
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

// run builds every box's daemon in the order given, which is their start order
// (what a daemon needs starts before it: the process's metrics and probes first,
// intake last), then runs them until ctx ends or one fails, and stops them in
// reverse order as n.shutdown says (see runInOrder); the first failure stops the
// others and is reported with the daemon's name. A box with nothing to run
// (`all`'s bridges when no broker is configured) builds a daemon without run,
// which is left out.
func (n *node) run(ctx context.Context, boxes ...box) error {
	if len(n.stream.Brokers) > 0 {
		if err := n.ensureTopics(ctx); err != nil {
			return err
		}
	}
	plan, err := n.shutdown.plan(n.health.Drain)
	if err != nil {
		return err
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
	for _, b := range boxes {
		d, err := b.daemon(ctx, n)
		if err != nil {
			return err
		}
		if d.run == nil {
			continue
		}
		daemons = append(daemons, d)
	}
	if n.ready != nil {
		n.ready(n)
	}
	err = runInOrder(ctx, daemons, plan, n.logger)
	if errors.Is(err, errShutdownTimeout) {
		// Daemons still run: closing what they hold would wait for them.
		n.abandoned = true
	}
	return err
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

// apiBox is the HTTP API, with the console, the heartbeat's view of the fleet,
// members' inboxes, the delivery controls and POST /notification's publisher.
type apiBox struct {
	API       webapi.Config
	Inbox     webapi.InboxConfig
	Heartbeat heartbeat.Config
	// Retention bounds the deliveries the API recovers (maintain's).
	Retention time.Duration
	// AMQP is POST /notification's publisher's broker.
	AMQP amqp.Config
}

// RegisterSettings declares the API's settings.
func (b *apiBox) RegisterSettings(s *settings.Set) {
	b.API.RegisterSettings(s)
	b.Inbox.RegisterSettings(s)
	b.Heartbeat.RegisterSettings(s)
	maintain.RegisterRetention(s, &b.Retention)
	b.AMQP.RegisterPublisherSettings(s)
}

// daemon serves the HTTP API, with ingest when Kafka is configured.
func (b *apiBox) daemon(ctx context.Context, n *node) (daemon, error) {
	token := b.API.AdminToken
	if token == "" {
		return daemon{}, errors.New("LOCKSTREAM_ADMIN_TOKEN / --admin-token is required: the admin API has no other protection")
	}
	// Secrets stored before they were encrypted at rest are encrypted now; until
	// then (and should this fail) they are read as they are.
	reg := registry.New(n.pg)
	if encrypted, err := reg.EncryptPlaintextSecrets(ctx); err != nil {
		n.logger.Warn("encrypting client secrets stored in plaintext failed; they stay readable and are tried again at the next start",
			"err", err)
	} else if encrypted > 0 {
		n.logger.Info("encrypted client secrets stored in plaintext", "clients", encrypted)
	}
	tracker, err := n.heartbeatTracker(b.Heartbeat)
	if err != nil {
		return daemon{}, err
	}
	con, err := newConsole(n, token, b.Inbox.MemberTokenIdle, tracker)
	if err != nil {
		return daemon{}, err
	}
	a := n.analytics()
	opts := []webapi.Option{webapi.WithHealth(n.health), webapi.WithHistory(a), webapi.WithAnalytics(a), webapi.WithDeliveries(n.pg, n.pg), webapi.WithClientEvents(n.pg), webapi.WithMaintenance(n.heartbeatStores().Postgres), webapi.WithPushes(n.pg, n.pg),
		webapi.WithSensorStatus(tracker),
		webapi.WithSensorObserver(tracker), webapi.WithLostSensors(tracker), webapi.WithConsole(con.Handler()),
		webapi.WithInbox(reg, live.NewPostgresStore(n.pg), n.redis, b.Inbox), webapi.WithUnregistered(consumer.NewPostgresStore(n.pg))}
	opts = append(opts, webapi.WithDeliveryControls(n.pg, b.Retention))
	opts = append(opts, webapi.WithIncidents(incident.NewAPIStore(incident.NewPostgresStore(n.pg))))
	d := daemon{name: "api"}
	publisher, err := notificationPublisher(b.AMQP, n.stream)
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
	apiCfg := b.API
	apiCfg.Now = n.now
	srv, err := webapi.New(apiCfg, reg, nil, n.reg, n.reg, n.logger, opts...)
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

// consumerBox is the state consumer.
type consumerBox struct {
	Heartbeat heartbeat.Config
	Flapping  consumer.Flapping
}

// RegisterSettings declares the consumer's settings: its flapping rule's and the
// heartbeat's, whose sightings it records.
func (b *consumerBox) RegisterSettings(s *settings.Set) {
	b.Heartbeat.RegisterSettings(s)
	b.Flapping.RegisterSettings(s)
}

func (b *consumerBox) daemon(_ context.Context, n *node) (daemon, error) {
	if err := n.requireBrokers(); err != nil {
		return daemon{}, err
	}
	tracker, err := n.heartbeatTracker(b.Heartbeat)
	if err != nil {
		return daemon{}, err
	}
	store := consumer.NewPostgresStore(n.pg)
	c, err := consumer.New(consumer.Config{Stream: n.stream, FlapChanges: b.Flapping.Changes, FlapWindow: b.Flapping.Window,
		Now: n.now},
		consumer.Deps{States: store, Sightings: tracker, Unregistered: store}, n.reg, n.logger.With("daemon", "consumer"))
	if err != nil {
		return daemon{}, err
	}
	return daemon{name: "consumer", run: c.Run}, nil
}

// historyBox is the history writer; it has no settings of its own.
type historyBox struct{}

// RegisterSettings declares nothing: the history writer runs on the node's.
func (historyBox) RegisterSettings(*settings.Set) {}

func (historyBox) daemon(_ context.Context, n *node) (daemon, error) {
	if err := n.requireBrokers(); err != nil {
		return daemon{}, err
	}
	h, err := history.New(history.Config{Stream: n.stream}, history.NewClickHouseStore(n.ch), n.reg, n.logger.With("daemon", "history"))
	if err != nil {
		return daemon{}, err
	}
	return daemon{name: "history", run: h.Run}, nil
}

// metricsBox serves /metrics, /healthz and /readyz for processes without the API.
type metricsBox struct {
	metricsSettings
}

// daemon serves /metrics, /healthz and /readyz (a ping of every store the
// process uses) on LOCKSTREAM_METRICS_ADDR for processes without the API; with no
// address it does nothing.
func (b *metricsBox) daemon(_ context.Context, n *node) (daemon, error) {
	addr := b.Addr
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

// allSettings are `lockstream all`'s: the node's and every box's. A setting two
// boxes read (the heartbeat's, the outbox retention, the SMTP server) is declared
// by the same code in each and bound to both.
type allSettings struct {
	Node       nodeSettings
	API        apiBox
	Consumer   consumerBox
	Heartbeat  heartbeatBox
	Fanout     fanoutBox
	Retrier    retrierBox
	Maintain   maintainBox
	Escalation escalationBox
	Bridge     bridgeBox
	Stats      statsSettings
	Shutdown   shutdownSettings
}

// newAllSettings returns `all`'s settings, to be registered: every store, Kafka,
// the data folder.
func newAllSettings() *allSettings {
	return &allSettings{Node: nodeSettings{need: usesAll | usesSecretKey | usesKafka | usesDataDir}}
}

// RegisterSettings declares every setting `all` reads.
func (c *allSettings) RegisterSettings(s *settings.Set) {
	s.Register(&c.Node, &c.API, &c.Consumer, &c.Heartbeat, &c.Fanout, &c.Retrier, &c.Maintain, &c.Escalation,
		&c.Bridge, &c.Stats, &c.Shutdown)
}

// boxes are `all`'s daemons in start order; the bridges only when a broker URL
// is set. First what reads the stores only, then what turns events into
// deliveries and history, then the state consumer, then intake (the bridges,
// then the API, whose listener also serves the probes). They stop in reverse:
// intake first, then each stage drains what it holds while the stages after it
// still run.
func (c *allSettings) boxes(stdout io.Writer) []box {
	boxes := []box{&statsBox{c.Stats, stdout}, &c.Maintain, &c.Escalation, &c.Retrier,
		&c.Fanout, historyBox{}, &c.Heartbeat, &c.Consumer}
	if c.Bridge.configured() {
		boxes = append(boxes, &c.Bridge)
	}
	return append(boxes, &c.API)
}

// startAll is `lockstream all`: it migrates, opens every store, starts the
// embedded broker on brokerAddr when no brokers are configured, and runs every
// daemon until ctx ends. ready, when not nil, is called once the daemons are
// built, just before they run (`lockstream bench pipeline` starts its load
// then).
func startAll(ctx context.Context, c *allSettings, stdout io.Writer, logger *slog.Logger, brokerAddr string, ready func(*node)) error {
	if err := migrations.Migrate(ctx, c.Node.PGURL, c.Node.ClickHouseURL, logger); err != nil {
		return err
	}
	n, err := openNode(ctx, &c.Node, logger)
	if err != nil {
		return err
	}
	defer n.close()
	if len(n.stream.Brokers) == 0 {
		dir := filepath.Join(c.Node.DataDir, "kafka")
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
	n.ready = ready
	n.shutdown = c.Shutdown
	return n.run(ctx, c.boxes(stdout)...)
}

// embeddedBrokerAddr is where `all` serves its embedded broker, so kcat and
// `lockstream simulate` find it without configuration.
const embeddedBrokerAddr = "127.0.0.1:9092"
