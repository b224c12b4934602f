// Package escalation escalates unseen messages (docs/DESIGN.md "Escalation of
// unseen messages", after JustDo's involuntary-unread design): an episode per
// (member, sensor) — per (member, type) for free-form notifications — opens when
// a message reaches the inbox unseen, and when it has been open for a wait the
// member gets one email (preference once_per_unread) and one push per device,
// or, with the digest preference, one email at each of its digest times. The
// inbox writes keep the episodes (package storage); this daemon runs rounds.
//
// A round is one transaction of a fixed number of statements whatever the
// number of members, episodes or messages, and it writes per member, not per
// episode: the due episodes are found by index, each member's cursors move
// over its due episodes (marking them handled), and each member gets one
// email and one push per device listing every episode of it the round
// escalated, expanded and checked again for access when sent. The retrier
// sends the deliveries as any other (retries, attempt log, delivery API). An
// advisory lock lets one round run at a time, so any number of processes may
// run the daemon without escalating twice; a crash rolls a round back whole.
package escalation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/internal/contain"
)

// Defaults of Config.
const (
	DefaultInterval   = 10 * time.Second
	DefaultEmailAfter = 15 * time.Minute
	DefaultPushAfter  = 2 * time.Minute
	DefaultLimit      = 20000
	DefaultTimeout    = time.Minute
)

// Config configures the Escalator.
type Config struct {
	// Interval is how often a round runs. Defaults to DefaultInterval (10s).
	Interval time.Duration
	// EmailAfter is how long an episode stays open before its email; a quarter
	// of it from a critical message. Defaults to DefaultEmailAfter (15m).
	EmailAfter time.Duration
	// PushAfter is the same for pushes. Defaults to DefaultPushAfter (2m).
	PushAfter time.Duration
	// Limit bounds the episodes (and the digest members) one round handles; a
	// full round is followed by another at once. Defaults to DefaultLimit
	// (20,000).
	Limit int
	// Timeout bounds one round. Defaults to DefaultTimeout (1m).
	Timeout time.Duration
	// Now returns the current time: it decides what is due and when digest
	// times come. Defaults to time.Now.
	Now func() time.Time
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.EmailAfter = cmp.Or(c.EmailAfter, DefaultEmailAfter)
	c.PushAfter = cmp.Or(c.PushAfter, DefaultPushAfter)
	c.Limit = cmp.Or(c.Limit, DefaultLimit)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate names the fields out of range.
func (c Config) Validate() error {
	var errs []error
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("escalation: Interval must be positive, got %s", c.Interval))
	}
	if c.EmailAfter <= 0 || c.PushAfter <= 0 {
		errs = append(errs, fmt.Errorf("escalation: EmailAfter and PushAfter must be positive, got %s and %s",
			c.EmailAfter, c.PushAfter))
	}
	if c.Limit <= 0 || c.Timeout <= 0 {
		errs = append(errs, errors.New("escalation: Limit and Timeout must be positive"))
	}
	return errors.Join(errs...)
}

// Store runs rounds (PostgresStore).
type Store interface {
	RunRound(ctx context.Context, r Round) (Result, error)
}

// Escalator runs escalation rounds. Create it with New.
type Escalator struct {
	cfg    Config
	store  Store
	m      *escalationMetrics
	panics *prometheus.CounterVec
	logger *slog.Logger
}

// New returns an Escalator; Run starts it. logger may be nil.
func New(cfg Config, store Store, reg prometheus.Registerer, logger *slog.Logger) (*Escalator, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, errors.New("escalation: the Store is nil")
	}
	if reg == nil {
		return nil, errors.New("escalation: the Registerer is nil")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newEscalationMetrics(reg)
	if err != nil {
		return nil, err
	}
	panics, err := contain.Counter(reg)
	if err != nil {
		return nil, err
	}
	return &Escalator{cfg: cfg, store: store, m: m, panics: panics, logger: logger}, nil
}

// Run runs a round at once and then every Interval (at once again after a
// full round) until ctx is cancelled, then returns nil. A round in progress
// at cancellation finishes first (within Timeout); a failed round is logged
// and counted, and the next one tries again; so is one that panicked (counted
// in lockstream_panics_total{where="escalation"}).
func (e *Escalator) Run(ctx context.Context) error {
	e.logger.InfoContext(ctx, "escalation started", "interval", e.cfg.Interval, "email_after", e.cfg.EmailAfter,
		"push_after", e.cfg.PushAfter, "limit", e.cfg.Limit)
	return contain.Loop(ctx, e.cfg.Interval, "escalation", e.panics, e.logger, func(ctx context.Context) (bool, error) {
		res, err := e.RunRound(ctx)
		return res.Full, err
	})
}

// RunRound runs one round now and records it in the metrics. The round is
// not cut short when ctx is cancelled (it is one transaction: cutting it
// would only roll it back); Timeout bounds it.
func (e *Escalator) RunRound(ctx context.Context) (Result, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.Timeout)
	defer cancel()
	start := time.Now()
	res, err := e.store.RunRound(rctx, Round{
		Now: e.cfg.Now(), EmailAfter: e.cfg.EmailAfter, PushAfter: e.cfg.PushAfter,
		Limit: e.cfg.Limit,
	})
	e.m.duration.Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		e.m.rounds.WithLabelValues("error").Inc()
		return res, err
	case !res.Ran:
		e.m.rounds.WithLabelValues("skipped").Inc()
	default:
		e.m.rounds.WithLabelValues("ran").Inc()
		e.m.episodes.Add(float64(res.Episodes))
		e.m.escalations.WithLabelValues("email").Add(float64(res.Emails))
		e.m.escalations.WithLabelValues("push").Add(float64(res.Pushes))
		e.m.escalations.WithLabelValues("digest").Add(float64(res.Digests))
	}
	e.m.statements.Set(float64(res.Statements))
	if res.Emails+res.Pushes+res.Digests > 0 {
		e.logger.InfoContext(ctx, "escalation round", "episodes", res.Episodes, "emails", res.Emails,
			"pushes", res.Pushes, "digests", res.Digests, "duration", time.Since(start))
	}
	return res, nil
}
