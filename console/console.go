// Package console is lockstream's operator console: server-rendered HTML pages under
// /console/ that `lockstream api` serves next to the JSON API. Every asset is embedded
// in the binary (nothing is fetched from the internet), pages are Go templates, and a
// little JavaScript drives the live event view; the changes chart is SVG rendered on
// the server.
//
// Sign-in takes a token (the admin token, or a member's token) and starts a
// session kept in Redis under the hash of an HttpOnly, SameSite=Strict
// cookie. Every response carries a Content-Security-Policy that allows only the
// console's own scripts and styles, no inline script; every form carries the
// session's CSRF token and is refused from another site.
//
// Each page costs what it shows, whatever the fleet's size: counts come from Redis
// cardinalities and Postgres' estimate, lists are index ranges in pages, the
// delivery summary reads a bounded window, the chart is one aggregate query.
//
// The console imports no daemon package: it declares the small interfaces it reads
// through, and cmd/lockstream wires storage and the heartbeat to them.
package console

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// Defaults of Config.
const (
	DefaultSessionTTL    = 12 * time.Hour
	DefaultPageSize      = 50
	DefaultSummaryWindow = 10_000
	DefaultSummarySince  = 7 * 24 * time.Hour
	DefaultLiveBacklog   = 10 * time.Second
	DefaultLiveLinger    = 30 * time.Second
	DefaultMaxLiveViews  = 100
)

// Config configures the console.
type Config struct {
	// AdminToken signs an admin in. Required: the same token as the admin API's.
	AdminToken string
	// SessionTTL is how long a session lasts after sign-in. Defaults to
	// DefaultSessionTTL (12h).
	SessionTTL time.Duration
	// PageSize is the length of every list page. Defaults to DefaultPageSize (50).
	PageSize int
	// SummaryWindow and SummarySince bound a client's delivery summary: its
	// deliveries created within SummarySince, at most the newest SummaryWindow.
	// Default to DefaultSummaryWindow (10,000) and DefaultSummarySince (7 days).
	SummaryWindow int
	SummarySince  time.Duration
	// LiveBacklog is how far back the live view starts: events appended that long
	// before the first viewer connected are shown too. Defaults to
	// DefaultLiveBacklog (10s).
	LiveBacklog time.Duration
	// LiveLinger keeps following the events topic that long after the last viewer
	// left, so a page reload does not restart the Kafka client. Defaults to
	// DefaultLiveLinger (30s).
	LiveLinger time.Duration
	// MaxLiveViews bounds the live views open at once in this process; more are
	// refused with 503. Defaults to DefaultMaxLiveViews (100).
	MaxLiveViews int
	// MemberTokenIdle: a member token unused for this long signs in no more, as
	// the API refuses it. Defaults to registry.DefaultMemberTokenIdle (60 days).
	MemberTokenIdle time.Duration
	// Now is the clock that places the history pages' days and the sensor
	// chart's hours, the live view's backlog and a session's start. Defaults
	// to time.Now.
	Now func() time.Time
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.SessionTTL = cmp.Or(c.SessionTTL, DefaultSessionTTL)
	c.PageSize = cmp.Or(c.PageSize, DefaultPageSize)
	c.SummaryWindow = cmp.Or(c.SummaryWindow, DefaultSummaryWindow)
	c.SummarySince = cmp.Or(c.SummarySince, DefaultSummarySince)
	c.LiveBacklog = cmp.Or(c.LiveBacklog, DefaultLiveBacklog)
	c.LiveLinger = cmp.Or(c.LiveLinger, DefaultLiveLinger)
	c.MaxLiveViews = cmp.Or(c.MaxLiveViews, DefaultMaxLiveViews)
	c.MemberTokenIdle = cmp.Or(c.MemberTokenIdle, registry.DefaultMemberTokenIdle)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate names the first field that cannot work.
func (c Config) Validate() error {
	switch {
	case c.AdminToken == "":
		return errors.New("console: AdminToken is required")
	case c.SessionTTL < time.Minute:
		return fmt.Errorf("console: SessionTTL must be at least 1m, got %s", c.SessionTTL)
	case c.PageSize < 1 || c.PageSize > 1000:
		return fmt.Errorf("console: PageSize must be 1 to 1000, got %d", c.PageSize)
	case c.SummaryWindow < 1, c.SummarySince <= 0, c.LiveBacklog < 0, c.LiveLinger < 0, c.MaxLiveViews < 1, c.MemberTokenIdle <= 0:
		return errors.New("console: SummaryWindow, SummarySince, MaxLiveViews and MemberTokenIdle must be positive, LiveBacklog and LiveLinger not negative")
	}
	return nil
}

// Registry is the part of registry.Store the console reads sensors and clients
// from.
type Registry interface {
	GetSensor(ctx context.Context, id string) (registry.Sensor, error)
	SearchSensors(ctx context.Context, prefix string, page storage.Page) ([]registry.Sensor, error)
	CountSensors(ctx context.Context) (n int64, exact bool, err error)
	ListSensorClients(ctx context.Context, sensorID string, page storage.Page) ([]registry.Client, error)
	ListClients(ctx context.Context, page storage.Page) ([]registry.Client, error)
	GetClient(ctx context.Context, id string) (registry.Client, error)
}

// Deliveries is the part of storage.Postgres the client page uses.
type Deliveries interface {
	ClientDeliverySummary(ctx context.Context, clientID string, since time.Time, window int) (storage.DeliverySummary, error)
	ClientFailedDeliveries(ctx context.Context, clientID string, page storage.Page) ([]storage.Delivery, error)
	// RetryDelivery makes a FAILED or GIVEN_UP delivery PENDING again; ErrConflict
	// for another state.
	RetryDelivery(ctx context.Context, id string) (storage.Delivery, error)
}

// Members is the part of registry.Store that signs members in and lists a
// client's members.
type Members interface {
	MemberByTokenHash(ctx context.Context, hash []byte, idle time.Duration) (registry.Member, error)
	// MemberTokenHash is the hash of the member's current token; ErrNotFound
	// once the member is deleted.
	MemberTokenHash(ctx context.Context, id string) ([]byte, error)
	ListClientMembers(ctx context.Context, clientID string, page storage.Page) ([]registry.Member, error)
}

// Inbox is the part of inbox.PostgresStore a member's inbox page reads and marks.
type Inbox interface {
	ListInbox(ctx context.Context, q inbox.Query) (int, []inbox.Message, error)
	MarkInbox(ctx context.Context, memberID string, action inbox.Action, ids []string, all bool) (int, error)
}

// Sessions stores console sessions (RedisStore).
type Sessions interface {
	CreateConsoleSession(ctx context.Context, id string, s StoredSession, ttl time.Duration) error
	ConsoleSession(ctx context.Context, id string) (StoredSession, error)
	DeleteConsoleSession(ctx context.Context, id string) error
}

// HeartbeatCounts counts the sensors the heartbeat tracks (online) and those it
// declared lost, in constant time (heartbeat.RedisStore: ZCARD and HLEN).
type HeartbeatCounts interface {
	CountHeartbeats(ctx context.Context) (tracked, lost int64, err error)
}

// Connection states, as the admin API names them.
const (
	ConnectionOnline  = domain.ConnectionOnline
	ConnectionLost    = domain.ConnectionLost
	ConnectionUnknown = domain.ConnectionUnknown
)

// LostSensor is a sensor whose connection is lost: when it last reported
// (LastSeen) and the deadline it missed (LostAt).
type LostSensor = domain.LostSensor

// Connections is the heartbeat's view of sensors.
type Connections interface {
	// Status returns when the sensor was last seen (zero when never) and its
	// connection: ConnectionOnline, ConnectionLost or ConnectionUnknown.
	Status(ctx context.Context, sensorID string) (lastSeen time.Time, connection string, err error)
	// LostSensors returns up to page.Limit lost sensors ordered by id, after
	// page.After.
	LostSensors(ctx context.Context, page storage.Page) ([]LostSensor, error)
}

// History is the part of analytics.Store the console reads: the sensor page's
// events and chart, the site and fleet pages' figures — the API's own
// figures, from the same code.
type History interface {
	SensorEvents(ctx context.Context, q analytics.ListQuery) (analytics.EventPage, error)
	Summary(ctx context.Context, q analytics.SummaryQuery) (analytics.Summary, error)
}

// EventTail follows the events topic: it calls fn with every event appended from
// since on, until ctx ends (then it returns nil) or it fails.
type EventTail interface {
	TailEvents(ctx context.Context, since time.Time, fn func(event.Event)) error
}

// Deps are what the console reads through. Events may be nil: the live view then
// says it needs Kafka. Members and Inbox may be nil together: then only the
// admin signs in, and client pages list no members. Incidents may be nil: the
// incident pages then answer 404.
type Deps struct {
	Registry    Registry
	Members     Members
	Inbox       Inbox
	Deliveries  Deliveries
	Sessions    Sessions
	Heartbeat   HeartbeatCounts
	Connections Connections
	History     History
	Events      EventTail
	Incidents   Incidents
}

func (d Deps) validate() error {
	var errs []error
	for name, dep := range map[string]any{"Registry": d.Registry, "Deliveries": d.Deliveries, "Sessions": d.Sessions,
		"Heartbeat": d.Heartbeat, "Connections": d.Connections, "History": d.History} {
		if dep == nil {
			errs = append(errs, fmt.Errorf("console: Deps.%s is nil", name))
		}
	}
	if (d.Members == nil) != (d.Inbox == nil) {
		errs = append(errs, errors.New("console: Deps.Members and Deps.Inbox go together"))
	}
	return errors.Join(errs...)
}

// Console serves the operator console. Build it with New, mount Handler under
// /console, and run Run for as long as the server serves it.
type Console struct {
	cfg     Config
	deps    Deps
	logger  *slog.Logger
	pages   *pages
	handler http.Handler
	live    *hub
	// adminCredential fingerprints the admin token, so sessions end when it changes.
	adminCredential string
}

// New builds the console. A nil logger discards the console's logs.
func New(cfg Config, deps Deps, reg prometheus.Registerer, logger *slog.Logger) (*Console, error) {
	cfg = cfg.WithDefaults()
	if err := errors.Join(cfg.Validate(), deps.validate()); err != nil {
		return nil, err
	}
	if reg == nil {
		return nil, errors.New("console: the Registerer is nil")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p, err := loadPages()
	if err != nil {
		return nil, err
	}
	live, err := newHub(cfg, deps.Events, reg, logger)
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, deps: deps, logger: logger, pages: p, live: live,
		adminCredential: credential("admin", cfg.AdminToken)}
	c.handler = c.routes()
	return c, nil
}

// Handler serves every console route; it expects the full path (/console/...).
func (c *Console) Handler() http.Handler { return c.handler }

// Run keeps the live view's machinery until ctx ends, then closes every live view
// so that the HTTP server's shutdown does not wait for them. It returns nil.
func (c *Console) Run(ctx context.Context) error {
	<-ctx.Done()
	c.live.close()
	return nil
}

// credential fingerprints a token for a session: enough to notice a rotation, not
// enough to recover the token.
func credential(role, token string) string {
	sum := sha256.Sum256([]byte("lockstream console " + role + "\x00" + token))
	return hex.EncodeToString(sum[:16])
}
