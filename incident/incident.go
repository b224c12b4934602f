// Package incident keeps incidents: problems of a client's sensor or site that
// its members own until they are resolved (docs/DESIGN.md "Incidents"). It is
// a box: it owns its tables (migrations 0016x) and their SQL, and runs as a
// daemon of the `escalation` command (and of `all`) two kinds of work:
//
//   - intake: the clients' event feeds (notifications by client_seq) read from
//     a durable cursor per client, in batches; a critical or warning event
//     opens an incident of its subject unless one is unresolved (it attaches
//     to it), a clearing event resolves it with its duration. A batch is one
//     transaction under an advisory lock, its cursor moves with its effects:
//     idempotent across restarts and processes.
//   - reminder rounds: a round moves one cursor over time and writes the
//     window it covered as a mark, in one statement whatever the number of
//     incidents; senders then take marks (SKIP LOCKED) and remind the members
//     of the tiers due in them in the inbox (and thereby on the stream), a
//     batch of incidents per statement, the mark moving with the reminders:
//     several processes never remind a member twice for one due time, and a
//     crash skips none.
//
// The API (package webapi) reads and acts on incidents through Store, which
// cmd/lockstream hands to it; the types it shares are in package domain.
package incident

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
	DefaultInterval = 10 * time.Second
	DefaultBatch    = 5000
	DefaultLimit    = 5000
	DefaultAckTTL   = 7 * 24 * time.Hour
	DefaultTimeout  = time.Minute
)

// Config configures the Runner.
type Config struct {
	// Interval is how often intake and a reminder round run (the escalation
	// command's LOCKSTREAM_ESCALATION_INTERVAL). Defaults to DefaultInterval.
	Interval time.Duration
	// Batch bounds the events one intake transaction reads. Defaults to
	// DefaultBatch (5,000).
	Batch int
	// Limit bounds the incidents one send statement reminds; a round's mark
	// is sent in as many statements as it needs. Defaults to DefaultLimit
	// (5,000).
	Limit int
	// PublicURL is where the API is reachable from outside; the one-click ack
	// links of reminders are PublicURL + "/ack/<token>". Empty: no links.
	PublicURL string
	// AckTTL is how long an ack link works. Defaults to DefaultAckTTL (7 days).
	AckTTL time.Duration
	// Retention is how long a resolved incident is kept; then it is deleted
	// with its timeline. 0 keeps them forever. The binary's default is
	// DefaultRetention (400 days).
	Retention time.Duration
	// Timeout bounds one transaction. Defaults to DefaultTimeout (1m).
	Timeout time.Duration
	// Now is the reminders' clock. Defaults to time.Now.
	Now func() time.Time
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.Batch = cmp.Or(c.Batch, DefaultBatch)
	c.Limit = cmp.Or(c.Limit, DefaultLimit)
	c.AckTTL = cmp.Or(c.AckTTL, DefaultAckTTL)
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
		errs = append(errs, fmt.Errorf("incident: Interval must be positive, got %s", c.Interval))
	}
	if c.Batch <= 0 || c.Limit <= 0 {
		errs = append(errs, fmt.Errorf("incident: Batch and Limit must be positive, got %d and %d", c.Batch, c.Limit))
	}
	if c.AckTTL <= 0 || c.Timeout <= 0 {
		errs = append(errs, errors.New("incident: AckTTL and Timeout must be positive"))
	}
	if c.Retention < 0 {
		errs = append(errs, fmt.Errorf("incident: Retention must not be negative, got %s", c.Retention))
	}
	return errors.Join(errs...)
}

// Runner runs intake and reminder rounds. Create it with New.
type Runner struct {
	cfg    Config
	store  *PostgresStore
	m      *incidentMetrics
	panics *prometheus.CounterVec
	logger *slog.Logger
}

// New returns a Runner over store; Run starts it. logger may be nil.
func New(cfg Config, store *PostgresStore, reg prometheus.Registerer, logger *slog.Logger) (*Runner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || reg == nil {
		return nil, errors.New("incident: the store and the Registerer must not be nil")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	panics, err := contain.Counter(reg)
	if err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg, store: store, m: m, panics: panics, logger: logger}, nil
}

// Run runs intake then a reminder round at once and then every Interval (at
// once again after a full one) until ctx is cancelled, then returns nil. A
// failed or panicking step is logged and counted; the next tick tries again.
func (r *Runner) Run(ctx context.Context) error {
	r.logger.InfoContext(ctx, "incidents started", "interval", r.cfg.Interval, "batch", r.cfg.Batch, "limit", r.cfg.Limit)
	return contain.Loop(ctx, r.cfg.Interval, "incident", r.panics, r.logger, r.Step)
}

// Step runs one intake batch, a purge (expired ack tokens, incidents past
// their retention), a reminder round with its sends and a publication of
// incident events (PublishEvents), each transaction within Timeout and not
// cut short by ctx (cutting it would only roll it back); full reports that
// intake or the publication may have left work behind.
func (r *Runner) Step(ctx context.Context) (full bool, err error) {
	in, err := r.Intake(ctx)
	if err != nil {
		return false, err
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Timeout)
	defer cancel()
	if err := r.purge(pctx); err != nil {
		return false, err
	}
	if _, err := r.Remind(ctx); err != nil {
		return false, err
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Timeout)
	defer cancel()
	pub, err := r.store.PublishEvents(ectx, r.cfg.Batch)
	if err != nil {
		return false, err
	}
	return in.Full || pub.Events >= r.cfg.Batch, nil
}

// tokenKeep is how long an expired ack token is kept before it is deleted.
const tokenKeep = 24 * time.Hour

// Intake runs one intake batch now.
func (r *Runner) Intake(ctx context.Context) (IntakeResult, error) {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Timeout)
	defer cancel()
	res, err := r.store.Intake(ictx, r.cfg.Batch)
	if err != nil {
		r.m.steps.WithLabelValues("intake", "error").Inc()
		return res, err
	}
	r.m.steps.WithLabelValues("intake", "ran").Inc()
	r.m.incidents.WithLabelValues("opened").Add(float64(res.Opened))
	r.m.incidents.WithLabelValues("resolved").Add(float64(res.Resolved))
	if res.Opened+res.Resolved > 0 {
		r.logger.InfoContext(ctx, "incident intake", "events", res.Events, "opened", res.Opened,
			"attached", res.Attached, "resolved", res.Resolved)
	}
	return res, nil
}

// Remind runs one reminder round now at the Config's clock (its mark), then
// sends marks until none is left to this process or ctx is done: each
// statement within Timeout.
func (r *Runner) Remind(ctx context.Context) (RoundResult, error) {
	start := time.Now()
	round := Round{Now: r.cfg.Now(), Limit: r.cfg.Limit, PublicURL: r.cfg.PublicURL, AckTTL: r.cfg.AckTTL}
	res, err := r.remind(ctx, round)
	r.m.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		r.m.steps.WithLabelValues("reminders", "error").Inc()
		return res, err
	}
	r.m.steps.WithLabelValues("reminders", "ran").Inc()
	r.m.reminders.Add(float64(res.Reminders))
	r.m.statements.Set(float64(res.Mark.Statements))
	if res.Reminders > 0 {
		r.logger.InfoContext(ctx, "incident reminders", "incidents", res.Incidents, "reminders", res.Reminders,
			"sends", res.Sends, "duration", time.Since(start))
	}
	return res, nil
}

func (r *Runner) remind(ctx context.Context, round Round) (RoundResult, error) {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Timeout)
	m, err := r.store.MarkRound(mctx, round.Now)
	cancel()
	if err != nil {
		return RoundResult{}, err
	}
	res := RoundResult{Mark: m, Statements: m.Statements}
	for ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Timeout)
		s, err := r.store.SendMarks(sctx, round)
		cancel()
		if err != nil {
			return res, err
		}
		res.Statements += s.Statements
		if s.Marks == 0 {
			break
		}
		res.Sends++
		res.Incidents += s.Incidents
		res.Reminders += s.Reminders
	}
	return res, nil
}
