// Package webapi is lockstream's HTTP API: the admin registry of sensors, clients and
// the links between them, plus health, readiness, Prometheus metrics and the OpenAPI
// document. Errors are RFC 9457 application/problem+json.
//
// Routes are declared in one place, routes.go; handlers live in a file per resource
// and return an error, which the server renders as a problem (see problem.go).
package webapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/webapi/live"
)

// Defaults of Config.
const (
	DefaultAddr              = "127.0.0.1:8080"
	DefaultShutdownTimeout   = 10 * time.Second
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultReadyTimeout      = 2 * time.Second
	DefaultMaxBodyBytes      = 1 << 20
	// DefaultMaxIngestBodyBytes fits MaxIngestReadings readings with room for
	// whitespace and RFC 3339 device times.
	DefaultMaxIngestBodyBytes = 4 << 20
	DefaultPublishTimeout     = 10 * time.Second
	// DefaultSecretOverlap is how long a rotated-out signing secret keeps signing
	// webhooks: a day covers a delivery's whole back-off (about 2 h) with room for
	// a receiver to deploy the new secret.
	DefaultSecretOverlap = 24 * time.Hour
)

// Config configures the HTTP server.
type Config struct {
	// Addr is the TCP address Run listens on. Defaults to DefaultAddr.
	Addr string
	// AdminToken is the bearer token every /v1 admin route requires. Required; use a
	// long random value, it is the only thing standing between the network and the
	// registry.
	AdminToken string
	// IngestToken is the bearer token POST /v1/readings requires, and the only one
	// it accepts: a device fleet's credential must not open the registry, nor the
	// admin token publish readings. Defaults to empty, which leaves the server
	// running with ingest disabled: POST /v1/readings answers 503. It must differ
	// from AdminToken.
	IngestToken string
	// PushToken is the bearer token the standalone push routes (POST /push,
	// POST /v1/pushes, GET /v1/pushes/{id}) require, and the only one they
	// accept: the services that send pushes need neither the registry nor
	// ingest. Defaults to empty, which leaves those routes answering 503. It must
	// differ from AdminToken and IngestToken.
	PushToken string
	// V1Token is a bearer token the CyVerse notification API v1 routes (GET
	// /messages, POST /seen, …) accept besides AdminToken, so that the agent's
	// old clients need not hold the admin token. Defaults to empty: those routes
	// take the admin token only. It must differ from IngestToken and PushToken.
	V1Token string
	// ShutdownTimeout bounds how long Run waits for in-flight requests once its
	// context is cancelled. Defaults to DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout bounds reading a request's headers, against slow-loris
	// clients. Defaults to DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included, against clients
	// that trickle a body. Defaults to DefaultReadTimeout.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end of its
	// answer; a connection still writing then is closed. Routes that stream for
	// longer (server-sent events) lift it for themselves (see Server.streaming).
	// Defaults to DefaultWriteTimeout.
	WriteTimeout time.Duration
	// RequestTimeout is the deadline of a handler's context, so that a store that
	// hangs turns into a 503 problem while the answer can still be written, rather
	// than a connection cut by WriteTimeout. It must be shorter than WriteTimeout.
	// Defaults to two thirds of WriteTimeout.
	RequestTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle for longer. Defaults to
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ReadyTimeout bounds each store's ping in GET /readyz. Defaults to
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// MaxBodyBytes is the largest request body accepted; larger ones get 413.
	// Defaults to DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// Now is the clock that ends the default ranges of the history, analytics
	// and delivery routes, times a received push and a rotated secret's
	// overlap, and judges maintenance windows. Defaults to time.Now.
	Now func() time.Time
	// MaxIngestBodyBytes is the largest body POST /v1/readings accepts; larger
	// ones get 413. Defaults to DefaultMaxIngestBodyBytes (4 MiB).
	MaxIngestBodyBytes int64
	// SecretOverlap is how long POST /v1/clients/{id}/secret keeps the secret it
	// replaces: webhooks are signed with both until then. Defaults to
	// DefaultSecretOverlap.
	SecretOverlap time.Duration
	// PublishTimeout bounds how long POST /v1/readings waits for the broker to
	// acknowledge a request's readings before answering 503. Defaults to
	// DefaultPublishTimeout.
	PublishTimeout time.Duration
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Addr = cmp.Or(c.Addr, DefaultAddr)
	if c.Now == nil {
		c.Now = time.Now
	}
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, DefaultShutdownTimeout)
	c.ReadHeaderTimeout = cmp.Or(c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, DefaultReadTimeout)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, c.WriteTimeout*2/3)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	c.ReadyTimeout = cmp.Or(c.ReadyTimeout, DefaultReadyTimeout)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.MaxIngestBodyBytes = cmp.Or(c.MaxIngestBodyBytes, DefaultMaxIngestBodyBytes)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, DefaultPublishTimeout)
	c.SecretOverlap = cmp.Or(c.SecretOverlap, DefaultSecretOverlap)
	return c
}

// Validate reports the first field of c that cannot work, by name.
func (c Config) Validate() error {
	if c.AdminToken == "" {
		return errors.New("webapi: AdminToken is required")
	}
	if c.IngestToken == c.AdminToken {
		return errors.New("webapi: IngestToken must differ from AdminToken")
	}
	if c.PushToken != "" && (c.PushToken == c.AdminToken || c.PushToken == c.IngestToken) {
		return errors.New("webapi: PushToken must differ from AdminToken and IngestToken")
	}
	if c.V1Token != "" && (c.V1Token == c.IngestToken || c.V1Token == c.PushToken) {
		return errors.New("webapi: V1Token must differ from IngestToken and PushToken")
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("webapi: Addr %q is not host:port: %w", c.Addr, err)
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{
		{"ShutdownTimeout", c.ShutdownTimeout},
		{"ReadHeaderTimeout", c.ReadHeaderTimeout},
		{"ReadTimeout", c.ReadTimeout},
		{"WriteTimeout", c.WriteTimeout},
		{"RequestTimeout", c.RequestTimeout},
		{"IdleTimeout", c.IdleTimeout},
		{"ReadyTimeout", c.ReadyTimeout},
		{"PublishTimeout", c.PublishTimeout},
		{"SecretOverlap", c.SecretOverlap},
	} {
		if d.value <= 0 {
			return fmt.Errorf("webapi: %s must be positive, got %s", d.name, d.value)
		}
	}
	if c.RequestTimeout >= c.WriteTimeout {
		return fmt.Errorf("webapi: RequestTimeout (%s) must be shorter than WriteTimeout (%s)", c.RequestTimeout, c.WriteTimeout)
	}
	if c.MaxBodyBytes <= 0 {
		return fmt.Errorf("webapi: MaxBodyBytes must be positive, got %d", c.MaxBodyBytes)
	}
	if c.MaxIngestBodyBytes <= 0 {
		return fmt.Errorf("webapi: MaxIngestBodyBytes must be positive, got %d", c.MaxIngestBodyBytes)
	}
	return nil
}

// Registry is the part of registry.Store the admin routes use.
type Registry interface {
	CreateSensor(ctx context.Context, s registry.Sensor) (registry.Sensor, error)
	GetSensor(ctx context.Context, id string) (registry.Sensor, error)
	ListSensors(ctx context.Context, page storage.Page) ([]registry.Sensor, error)
	SensorsByID(ctx context.Context, ids []string) ([]registry.Sensor, error)
	UpdateSensor(ctx context.Context, id string, u registry.SensorUpdate) (registry.Sensor, error)
	DeleteSensor(ctx context.Context, id string) error

	CreateClient(ctx context.Context, c registry.Client) (registry.Client, error)
	GetClient(ctx context.Context, id string) (registry.Client, error)
	ListClients(ctx context.Context, page storage.Page) ([]registry.Client, error)
	UpdateClient(ctx context.Context, id string, u registry.ClientUpdate) (registry.Client, error)
	RotateClientSecret(ctx context.Context, id, secret string, keepPreviousUntil time.Time) (registry.Client, error)
	DeleteClient(ctx context.Context, id string) error

	LinkSensor(ctx context.Context, clientID, sensorID string) error
	UnlinkSensor(ctx context.Context, clientID, sensorID string) error
	ListClientSensors(ctx context.Context, clientID string, page storage.Page) ([]registry.Sensor, error)
	ListSensorClients(ctx context.Context, sensorID string, page storage.Page) ([]registry.Client, error)
}

// Pinger is a store GET /readyz checks.
type Pinger interface {
	Ping(ctx context.Context) error
}

// PingerFunc adapts a function to Pinger, for readiness checks that are not a store
// client (a Kafka admin call, say).
type PingerFunc func(ctx context.Context) error

// Ping calls f.
func (f PingerFunc) Ping(ctx context.Context) error { return f(ctx) }

// The connection states a sensor shows in the API.
const (
	ConnectionOnline  = domain.ConnectionOnline
	ConnectionLost    = domain.ConnectionLost
	ConnectionUnknown = domain.ConnectionUnknown
)

// SensorConnection is what the heartbeat knows of one sensor: when it was
// last seen (zero when never) and its connection.
type SensorConnection = domain.SensorConnection

// SensorStatus reports what the heartbeat knows of sensors, a page at a time: one
// call (and one store round trip) per page of a sensor list, whatever its length.
// A sensor missing from the answer shows "connection": "unknown". Without one (see
// WithSensorStatus) every sensor shows "last_seen": null and "connection": "unknown".
type SensorStatus interface {
	SensorStatuses(ctx context.Context, sensorIDs []string) (map[string]SensorConnection, error)
}

// SensorObserver is told after a sensor's registration changed, so that a component
// caching registrations (the heartbeat's per-sensor timeouts) can refresh or forget
// it. Its errors are logged, not returned to the API caller: the change itself is
// already committed.
type SensorObserver interface {
	SensorCreated(ctx context.Context, sensorID string, createdAt time.Time) error
	SensorUpdated(ctx context.Context, sensorID string) error
	SensorDeleted(ctx context.Context, sensorID string) error
}

// LostSensors lists the sensors whose connection is lost, for
// GET /v1/sensors?connection=lost.
type LostSensors interface {
	// LostSensorIDs returns up to page.Limit lost sensor ids ordered by id, after
	// page.After; unregistered sensors may be among them.
	LostSensorIDs(ctx context.Context, page storage.Page) ([]string, error)
}

// WithHealth serves h's probes on GET /healthz and GET /readyz in place of ones
// built from New's checks: the process shares one Health between the API and
// its shutdown, which drains it (Health.Drain) before anything stops.
func WithHealth(h *Health) Option {
	return func(s *Server) { s.health = h }
}

// WithLostSensors lets GET /v1/sensors filter on connection=lost.
func WithLostSensors(lost LostSensors) Option {
	return func(s *Server) { s.lost = lost }
}

// Option adds an optional dependency to a Server.
type Option func(*Server)

// WithSensorStatus makes sensor responses show the heartbeat's view of each sensor.
func WithSensorStatus(status SensorStatus) Option {
	return func(s *Server) { s.status = status }
}

// WithSensorObserver tells observer about every sensor PATCH and DELETE.
func WithSensorObserver(observer SensorObserver) Option {
	return func(s *Server) { s.observer = observer }
}

// WithReadingPublisher makes POST /v1/readings produce through publisher. Without
// one the route answers 503.
func WithReadingPublisher(publisher ReadingPublisher) Option {
	return func(s *Server) { s.publisher = publisher }
}

// WithHistory serves the history routes (GET /v1/sensors/{id}/events and
// /readings) from history. Without one they answer 503.
func WithHistory(history History) Option {
	return func(s *Server) { s.history = history }
}

// WithDeliveries serves the delivery routes (GET /v1/clients/{id}/deliveries,
// GET /v1/deliveries/{id} and POST /v1/deliveries/{id}/retry) from the outbox in
// store and the attempt log in attempts. Without it they answer 503; with a nil
// attempts only GET /v1/deliveries/{id} does.
func WithDeliveries(store DeliveryStore, attempts DeliveryAttempts) Option {
	return func(s *Server) {
		s.deliveries = store
		s.attempts = attempts
	}
}

// Server serves the HTTP API. Build it with New.
type Server struct {
	cfg      Config
	registry Registry
	health   *Health
	gatherer prometheus.Gatherer
	logger   *slog.Logger
	status   SensorStatus
	observer SensorObserver
	lost     LostSensors
	// unregistered serves GET /v1/sensors/unregistered; see WithUnregistered.
	unregistered UnregisteredSensors
	publisher    ReadingPublisher
	history      History
	analytics    Analytics
	metrics      *metrics
	handler      http.Handler

	// deliveries and attempts serve the delivery routes; see WithDeliveries.
	deliveries DeliveryStore
	attempts   DeliveryAttempts
	// clientEvents serves the reconcile feed; see WithClientEvents.
	clientEvents ClientEvents
	// maintenance serves the maintenance routes; see WithMaintenance.
	maintenance MaintenanceStore

	// controls and retention serve the delivery controls; see
	// WithDeliveryControls.
	controls       DeliveryControls
	retention      time.Duration
	controlMetrics *controlMetrics

	// pushes and pushAttempts serve the push routes; see WithPushes.
	pushes       PushStore
	pushAttempts DeliveryAttempts
	pushMetrics  *pushMetrics

	// incidents serves the incident routes; see WithIncidents.
	incidents IncidentStore

	// console serves /console; see WithConsole.
	console http.Handler

	// notifications publishes POST /notification; see WithNotificationPublisher.
	notifications NotificationPublisher

	// members, inbox and tickets serve members, inboxes and live streams; see
	// WithInbox. hub feeds the streams.
	members       MemberStore
	inbox         InboxStore
	tickets       StreamTickets
	inboxCfg      InboxConfig
	hub           *live.Hub
	streamMetrics *streamMetrics
	// frames lends buffers (*[]byte) to the hub's writes at once to streams.
	frames sync.Pool
}

// New builds the server. checks names the stores GET /readyz pings (for instance
// "postgres", "redis", "clickhouse"); /metrics serves gatherer, and the server's own
// metrics are registered with reg. A nil logger logs nothing.
func New(cfg Config, registry Registry, checks map[string]Pinger, reg prometheus.Registerer,
	gatherer prometheus.Gatherer, logger *slog.Logger, opts ...Option) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case registry == nil:
		return nil, errors.New("webapi: registry is nil")
	case reg == nil:
		return nil, errors.New("webapi: prometheus registerer is nil")
	case gatherer == nil:
		return nil, errors.New("webapi: prometheus gatherer is nil")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	for name, check := range checks {
		if check == nil {
			return nil, fmt.Errorf("webapi: readiness check %q is nil", name)
		}
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	pm, err := newPushMetrics(reg)
	if err != nil {
		return nil, err
	}
	cm, err := newControlMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Server{
		controlMetrics: cm,
		cfg:            cfg,
		registry:       registry,
		gatherer:       gatherer,
		logger:         logger,
		metrics:        m,

		pushMetrics: pm,
	}
	for _, opt := range opts {
		opt(s)
	}
	if s.health == nil {
		s.health = NewHealth(checks, cfg.ReadyTimeout, logger)
	}
	if s.streamMetrics, err = newStreamMetrics(reg); err != nil {
		return nil, fmt.Errorf("registering stream metrics: %w", err)
	}
	s.inboxCfg = s.inboxCfg.WithDefaults()
	if err := s.inboxCfg.Validate(); err != nil {
		return nil, err
	}
	hubMetrics, err := live.NewHubMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("registering stream metrics: %w", err)
	}
	if s.inbox != nil {
		s.hub = live.NewHub(s.inbox, live.HubConfig{Buffer: s.inboxCfg.StreamBuffer,
			FetchBatch: s.inboxCfg.StreamFetchBatch, WriteTimeout: s.inboxCfg.StreamWriteTimeout,
			ListenRetry: s.inboxCfg.ListenRetry}, hubMetrics, logger.With("component", "stream-hub"))
	}
	s.handler = s.routes()
	return s, nil
}

// Handler returns the API as an http.Handler, for tests and for mounting elsewhere.
func (s *Server) Handler() http.Handler {
	return s.handler
}

// Run listens on cfg.Addr and serves until ctx is cancelled, then stops accepting
// connections and waits up to cfg.ShutdownTimeout for in-flight requests. It returns
// nil on such a clean stop.
func (s *Server) Run(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// httpServer is the http.Server of Serve: every timeout set, so that slow or
// stalled clients cost a bounded amount of time.
func (s *Server) httpServer(ctx context.Context, handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		// Requests must outlive the cancellation of ctx so that shutdown drains them
		// instead of aborting their queries half-way.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
}

// Serve is Run on a listener the caller opened (and Serve closes); tests use it to
// listen on a free port.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := s.httpServer(ctx, s.handler)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// The streams end when ctx does, so that shutdown does not wait for them.
	var streams sync.WaitGroup
	defer streams.Wait()
	streamsCtx, stopStreams := context.WithCancel(ctx)
	defer stopStreams() // first: also when serving failed
	streams.Go(func() {
		if err := s.RunStreams(streamsCtx); err != nil {
			s.logger.ErrorContext(ctx, "the live stream hub failed", "err", err)
		}
	})
	s.logger.InfoContext(ctx, "http server listening", "addr", ln.Addr().String())

	select {
	case err := <-served:
		return fmt.Errorf("serving http on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		closeErr := srv.Close()
		<-served
		return errors.Join(fmt.Errorf("draining http requests: %w", err), closeErr)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving http on %s: %w", ln.Addr(), err)
	}
	s.logger.InfoContext(shutdownCtx, "http server stopped")
	return nil
}
