package retrier

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lockstream/lockstream/storage"
)

// Defaults of Config.
const (
	DefaultMaxAttempts          = 10
	DefaultBackoffBase          = 5 * time.Minute
	DefaultBackoffMax           = time.Hour
	DefaultWorkers              = 256
	DefaultPushWorkers          = 600
	DefaultBatchSize            = 100
	DefaultFinishBatchSize      = 500
	DefaultPollInterval         = 50 * time.Millisecond
	DefaultFallbackPollInterval = time.Second
	DefaultListenRetry          = time.Second
	DefaultAttemptTimeout       = time.Minute
	DefaultLease                = 2 * time.Minute
	DefaultLeaseSweepInterval   = 30 * time.Second
	DefaultStatsInterval        = 15 * time.Second
	DefaultDrainTimeout         = 30 * time.Second
	DefaultWriteTimeout         = 10 * time.Second
	DefaultAttemptFlushInterval = time.Second
	DefaultAttemptBatchSize     = 5000
	DefaultDisableAfter         = 5 * 24 * time.Hour
	DefaultDisableMinFailures   = 10
	DefaultFailingAfter         = storage.DefaultEndpointFailingAfter
	DefaultRateLimitWindow      = 1200 * time.Millisecond
)

// maxEndpointSweepInterval bounds the default EndpointSweepInterval.
const maxEndpointSweepInterval = time.Minute

// Config configures a Retrier.
type Config struct {
	// MaxAttempts is how many attempts a delivery gets before it is GIVEN_UP
	// (LOCKSTREAM_RETRY_MAX_ATTEMPTS). Defaults to DefaultMaxAttempts (10).
	MaxAttempts int

	// BackoffBase scales the delay between attempts; see Backoff. Defaults to
	// DefaultBackoffBase (5m).
	BackoffBase time.Duration

	// BackoffMax caps the delay between attempts, Retry-After included. Defaults to
	// DefaultBackoffMax (1h).
	BackoffMax time.Duration

	// Workers bounds the attempts in flight in this process; the retrier claims
	// only as many deliveries as it has free workers, so claimed deliveries never
	// queue behind others while their lease runs. Defaults to DefaultWorkers (256, chosen with `lockstream bench pipeline`).
	Workers int

	// PushWorkers bounds the Swrve attempts in flight in this process, apart
	// from Workers: Swrve takes about a second to answer, so at its 300 sends a
	// second a push needs ten times the slots a webhook does, and pushes must
	// not starve webhooks and email of theirs (nor the other way round). The
	// Swrve sender's own rate and pool hold back the requests themselves, so
	// PushWorkers should be at least that pool (rate × expected latency).
	// Defaults to DefaultPushWorkers (600, the pool at Swrve's defaults).
	PushWorkers int

	// BatchSize is the most deliveries one claim takes. Defaults to
	// DefaultBatchSize (100).
	BatchSize int

	// FinishBatchSize is the most outcomes one write records. Outcomes wait
	// for the write before them, so under load a write records all that
	// finished meanwhile, up to this many: one statement per few hundred
	// deliveries rather than per claim. Defaults to DefaultFinishBatchSize (500).
	FinishBatchSize int

	// PollInterval is how often the retrier looks for due deliveries when the
	// last look found none; it bounds how long a new delivery waits. Defaults to
	// DefaultPollInterval (50ms).
	PollInterval time.Duration

	// FallbackPollInterval is how often the retrier looks for due deliveries
	// while its outbox listener (Deps.Wakeups) is up: new deliveries wake it
	// then, and the poll only finds retries and scheduled pushes coming due.
	// Defaults to DefaultFallbackPollInterval (1s).
	FallbackPollInterval time.Duration

	// ListenRetry is how long the retrier waits before listening again after
	// its outbox listener failed (it polls every PollInterval meanwhile).
	// Defaults to DefaultListenRetry (1s).
	ListenRetry time.Duration

	// AttemptTimeout bounds one attempt, waiting for the channel included; the
	// channel's own timeout (15s for webhooks) usually ends it first. Defaults to
	// DefaultAttemptTimeout (1m).
	AttemptTimeout time.Duration

	// Lease is how long a claimed delivery stays IN_FLIGHT before any retrier's
	// sweep puts it back to PENDING, because the retrier holding it must have died.
	// It must be longer than AttemptTimeout, or live attempts get sent twice.
	// Defaults to DefaultLease (2m).
	Lease time.Duration

	// LeaseSweepInterval is how often expired leases are looked for. Defaults to
	// DefaultLeaseSweepInterval (30s).
	LeaseSweepInterval time.Duration

	// StatsInterval is how often the outbox depth and oldest due age gauges are
	// refreshed. Defaults to DefaultStatsInterval (15s).
	StatsInterval time.Duration

	// DrainTimeout bounds how long attempts in flight at shutdown may still run;
	// past it they are cancelled (and recorded as retryable). Defaults to
	// DefaultDrainTimeout (30s).
	DrainTimeout time.Duration

	// WriteTimeout bounds each write of outcomes to Postgres and of attempts to
	// ClickHouse, the final ones at shutdown included. Defaults to
	// DefaultWriteTimeout (10s).
	WriteTimeout time.Duration

	// AttemptFlushInterval is how often the attempt log (in Postgres) is
	// copied to ClickHouse. Defaults to DefaultAttemptFlushInterval (1s).
	AttemptFlushInterval time.Duration

	// AttemptBatchSize is the most attempts copied to ClickHouse in one batch.
	// Defaults to DefaultAttemptBatchSize (5000).
	AttemptBatchSize int

	// DisableAfter is how long every attempt at a webhook endpoint must have
	// failed before it is disabled (LOCKSTREAM_ENDPOINT_DISABLE_AFTER). Defaults
	// to DefaultDisableAfter (5 days).
	DisableAfter time.Duration

	// DisableMinFailures is the fewest failed attempts in that time that
	// disable an endpoint (LOCKSTREAM_ENDPOINT_DISABLE_MIN_FAILURES). Defaults to
	// DefaultDisableMinFailures (10).
	DisableMinFailures int

	// FailingAfter is how many consecutive failed attempts make an endpoint
	// failing: its client gets one endpoint_failing notice per streak
	// (LOCKSTREAM_ENDPOINT_FAILING_AFTER). Defaults to DefaultFailingAfter (5).
	FailingAfter int

	// EndpointSweepInterval is how often endpoints are checked for disabling
	// and their owners' emails sent. Defaults to a tenth of DisableAfter, at
	// most a minute.
	EndpointSweepInterval time.Duration

	// RateLimitWindow is the window a rate limit counts in: an endpoint limited
	// to n a second starts deliveries at least RateLimitWindow/n apart. A
	// window over a second leaves room for deliveries whose travel time varies:
	// a receiver sees at most n in any second while that variation stays under
	// RateLimitWindow − 1s. Defaults to DefaultRateLimitWindow (1.2s).
	RateLimitWindow time.Duration

	// Now returns the current time, which decides what is due; tests inject a
	// clock. Defaults to time.Now.
	Now func() time.Time

	// Rand returns floats in [0, 1) for the back-off's jitter; tests inject a
	// constant. Defaults to math/rand/v2.Float64.
	Rand func() float64
}

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.BackoffBase = cmp.Or(c.BackoffBase, DefaultBackoffBase)
	c.BackoffMax = cmp.Or(c.BackoffMax, DefaultBackoffMax)
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.PushWorkers = cmp.Or(c.PushWorkers, DefaultPushWorkers)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.FinishBatchSize = cmp.Or(c.FinishBatchSize, DefaultFinishBatchSize)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.FallbackPollInterval = cmp.Or(c.FallbackPollInterval, DefaultFallbackPollInterval)
	c.ListenRetry = cmp.Or(c.ListenRetry, DefaultListenRetry)
	c.AttemptTimeout = cmp.Or(c.AttemptTimeout, DefaultAttemptTimeout)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.LeaseSweepInterval = cmp.Or(c.LeaseSweepInterval, DefaultLeaseSweepInterval)
	c.StatsInterval = cmp.Or(c.StatsInterval, DefaultStatsInterval)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	c.AttemptFlushInterval = cmp.Or(c.AttemptFlushInterval, DefaultAttemptFlushInterval)
	c.AttemptBatchSize = cmp.Or(c.AttemptBatchSize, DefaultAttemptBatchSize)
	c.DisableAfter = cmp.Or(c.DisableAfter, DefaultDisableAfter)
	c.DisableMinFailures = cmp.Or(c.DisableMinFailures, DefaultDisableMinFailures)
	c.FailingAfter = cmp.Or(c.FailingAfter, DefaultFailingAfter)
	c.EndpointSweepInterval = cmp.Or(c.EndpointSweepInterval, min(maxEndpointSweepInterval, c.DisableAfter/10))
	c.RateLimitWindow = cmp.Or(c.RateLimitWindow, DefaultRateLimitWindow)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return c
}

// Validate reports every field of c that is out of range, naming it.
func (c Config) Validate() error {
	var errs []error
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("retrier: %s %s must be positive", name, d))
		}
	}
	atLeastOne := func(name string, n int) {
		if n < 1 {
			errs = append(errs, fmt.Errorf("retrier: %s %d must be at least 1", name, n))
		}
	}
	atLeastOne("MaxAttempts", c.MaxAttempts)
	atLeastOne("Workers", c.Workers)
	atLeastOne("PushWorkers", c.PushWorkers)
	atLeastOne("BatchSize", c.BatchSize)
	atLeastOne("FinishBatchSize", c.FinishBatchSize)
	atLeastOne("AttemptBatchSize", c.AttemptBatchSize)
	positive("BackoffBase", c.BackoffBase)
	positive("BackoffMax", c.BackoffMax)
	positive("PollInterval", c.PollInterval)
	positive("FallbackPollInterval", c.FallbackPollInterval)
	positive("ListenRetry", c.ListenRetry)
	positive("AttemptTimeout", c.AttemptTimeout)
	positive("Lease", c.Lease)
	positive("LeaseSweepInterval", c.LeaseSweepInterval)
	positive("StatsInterval", c.StatsInterval)
	positive("DrainTimeout", c.DrainTimeout)
	positive("WriteTimeout", c.WriteTimeout)
	positive("AttemptFlushInterval", c.AttemptFlushInterval)
	positive("DisableAfter", c.DisableAfter)
	positive("EndpointSweepInterval", c.EndpointSweepInterval)
	positive("RateLimitWindow", c.RateLimitWindow)
	atLeastOne("DisableMinFailures", c.DisableMinFailures)
	atLeastOne("FailingAfter", c.FailingAfter)
	if c.BackoffMax < c.BackoffBase {
		errs = append(errs, fmt.Errorf("retrier: BackoffMax %s is shorter than BackoffBase %s", c.BackoffMax, c.BackoffBase))
	}
	if c.Lease <= c.AttemptTimeout {
		errs = append(errs, fmt.Errorf("retrier: Lease %s must be longer than AttemptTimeout %s", c.Lease, c.AttemptTimeout))
	}
	if c.Now == nil {
		errs = append(errs, errors.New("retrier: Now is nil"))
	}
	if c.Rand == nil {
		errs = append(errs, errors.New("retrier: Rand is nil"))
	}
	return errors.Join(errs...)
}
