package heartbeat

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// Defaults of Config.
const (
	DefaultTimeout          = time.Hour
	DefaultCoalesceFraction = 0.1
	DefaultCoalesceCapacity = 1_000_000
	DefaultTimeoutRefresh   = time.Minute
	DefaultSweepInterval    = 10 * time.Second
	DefaultClaimBatch       = 1000
	DefaultPublishTimeout   = 30 * time.Second
	DefaultRebuildTimeout   = 5 * time.Minute
	// DefaultRebuildHistoryWait is the default RebuildHistoryWait: the history
	// writer stores within a second and commits every 5 s.
	DefaultRebuildHistoryWait = 30 * time.Second
	DefaultRestoreMemory      = 24 * time.Hour
	DefaultEmittedCapacity    = 100_000
)

// Config configures the Tracker and the Daemon. Both must use the same Timeout and
// CoalesceFraction: together they turn a sighting into a deadline and back.
type Config struct {
	// Timeout is how long a sensor without a timeout of its own may stay silent
	// before it is declared lost (LOCKSTREAM_HEARTBEAT_TIMEOUT). Defaults to
	// DefaultTimeout (1h).
	Timeout time.Duration

	// CoalesceFraction is the fraction of a sensor's timeout within which a new
	// sighting needs no write, because one was written that recently. To keep every
	// loss honest (silent for at least the timeout), deadlines carry the same slack:
	// a loss is declared between timeout and timeout × (1 + fraction) after the last
	// reading. Negative disables coalescing. Defaults to DefaultCoalesceFraction (0.1).
	CoalesceFraction float64

	// CoalesceCapacity bounds how many sensors' last writes the Tracker remembers for
	// coalescing (about 80 bytes each); past it the oldest half is forgotten, which
	// costs writes, never correctness. Defaults to DefaultCoalesceCapacity (1,000,000).
	CoalesceCapacity int

	// TimeoutRefresh is how often the Tracker reloads per-sensor timeouts from
	// Postgres, to pick up a PATCH made by another process. Defaults to
	// DefaultTimeoutRefresh (1m).
	TimeoutRefresh time.Duration

	// SweepInterval is how often the Daemon looks for sensors past their deadline.
	// Defaults to DefaultSweepInterval (10s).
	SweepInterval time.Duration

	// ClaimBatch is how many expired sensors a sweep claims, and publishes, at a time.
	// At most MaxBatch. Defaults to DefaultClaimBatch (1000).
	ClaimBatch int

	// PublishTimeout bounds one publication of lost events. A claimed loss whose
	// publication is not confirmed within twice this time is published again by the
	// next sweep of any daemon. Defaults to DefaultPublishTimeout (30s).
	PublishTimeout time.Duration

	// RebuildTimeout bounds a rebuild of the Redis sets from Postgres and ClickHouse;
	// other daemons wait for it that long at most. Defaults to DefaultRebuildTimeout
	// (5m).
	RebuildTimeout time.Duration

	// RebuildHistoryWait bounds how long a rebuild waits, before it reads
	// ClickHouse, for the history writer to store every event published before
	// the rebuild began (Deps.HistoryProgress), so that a loss published just
	// before Redis lost its data is put back. Past it the rebuild reads what
	// ClickHouse has, logs a warning and counts
	// lockstream_heartbeat_rebuild_history_behind_total. It is measured on the
	// real clock, like RebuildTimeout, and must be shorter than it
	// (LOCKSTREAM_HEARTBEAT_REBUILD_HISTORY_WAIT). Defaults to
	// DefaultRebuildHistoryWait (30s).
	RebuildHistoryWait time.Duration

	// RestoreMemory is how long Redis remembers a connection_restored, so that a
	// consumer that crashed after recording a sighting but before producing its
	// restore gets the restore again when it replays the batch, after restarting
	// within this time. Defaults to DefaultRestoreMemory (24h).
	RestoreMemory time.Duration

	// EmittedCapacity bounds how many restores a Tracker remembers having returned,
	// so that only a restarted process (which has forgotten) gets a remembered
	// restore again; past it the oldest half is forgotten, which costs a duplicate
	// event (dropped downstream by its id), never a lost one. Defaults to
	// DefaultEmittedCapacity (100,000).
	EmittedCapacity int

	// SiteOutageMin is how many of a site's sensors, and at least half of
	// them, must be lost within one Timeout for a site_outage. Defaults to
	// DefaultSiteOutageMin (3).
	SiteOutageMin int

	// SiteHold is how long after its deadline the loss of a sensor with a site
	// is held before it is judged and published, so that the other losses of
	// an outage (deadlines spread by the coalescing slack) are in by then.
	// Defaults to Timeout × CoalesceFraction + 2 × SweepInterval + 1s.
	SiteHold time.Duration

	// FlapWindow is how long an unstable sensor must be quiet to be stable
	// again (the state consumer's FlapWindow). Defaults to 1m.
	FlapWindow time.Duration

	// Now returns the current time; tests inject a clock. Defaults to time.Now.
	Now func() time.Time
}

// DefaultSiteOutageMin is the default SiteOutageMin.
const DefaultSiteOutageMin = 3

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.CoalesceFraction = cmp.Or(c.CoalesceFraction, DefaultCoalesceFraction)
	c.CoalesceCapacity = cmp.Or(c.CoalesceCapacity, DefaultCoalesceCapacity)
	c.TimeoutRefresh = cmp.Or(c.TimeoutRefresh, DefaultTimeoutRefresh)
	c.SweepInterval = cmp.Or(c.SweepInterval, DefaultSweepInterval)
	c.ClaimBatch = cmp.Or(c.ClaimBatch, DefaultClaimBatch)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, DefaultPublishTimeout)
	c.RebuildTimeout = cmp.Or(c.RebuildTimeout, DefaultRebuildTimeout)
	c.RebuildHistoryWait = cmp.Or(c.RebuildHistoryWait, DefaultRebuildHistoryWait)
	c.RestoreMemory = cmp.Or(c.RestoreMemory, DefaultRestoreMemory)
	c.EmittedCapacity = cmp.Or(c.EmittedCapacity, DefaultEmittedCapacity)
	c.SiteOutageMin = cmp.Or(c.SiteOutageMin, DefaultSiteOutageMin)
	c.FlapWindow = cmp.Or(c.FlapWindow, time.Minute)
	if c.SiteHold == 0 {
		c.SiteHold = time.Duration(float64(c.Timeout)*c.CoalesceFraction) + 2*c.SweepInterval + time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports every field of c that is out of range, after defaults.
func (c Config) Validate() error {
	var errs []error
	if c.SiteOutageMin < 1 {
		errs = append(errs, fmt.Errorf("heartbeat: SiteOutageMin %d must be at least 1", c.SiteOutageMin))
	}
	if c.SiteHold < 0 {
		errs = append(errs, fmt.Errorf("heartbeat: SiteHold %s must not be negative", c.SiteHold))
	}
	if c.Timeout < time.Second {
		errs = append(errs, fmt.Errorf("heartbeat: Timeout %s is shorter than 1s", c.Timeout))
	}
	if c.CoalesceFraction >= 1 {
		errs = append(errs, fmt.Errorf("heartbeat: CoalesceFraction %g must be below 1", c.CoalesceFraction))
	}
	if c.CoalesceCapacity < 2 {
		errs = append(errs, fmt.Errorf("heartbeat: CoalesceCapacity %d must be at least 2", c.CoalesceCapacity))
	}
	if c.TimeoutRefresh <= 0 {
		errs = append(errs, fmt.Errorf("heartbeat: TimeoutRefresh %s must be positive", c.TimeoutRefresh))
	}
	if c.SweepInterval <= 0 {
		errs = append(errs, fmt.Errorf("heartbeat: SweepInterval %s must be positive", c.SweepInterval))
	}
	if c.ClaimBatch < 1 || c.ClaimBatch > MaxBatch {
		errs = append(errs, fmt.Errorf("heartbeat: ClaimBatch %d must be between 1 and %d", c.ClaimBatch, MaxBatch))
	}
	if c.PublishTimeout <= 0 {
		errs = append(errs, fmt.Errorf("heartbeat: PublishTimeout %s must be positive", c.PublishTimeout))
	}
	if c.RebuildTimeout <= 0 {
		errs = append(errs, fmt.Errorf("heartbeat: RebuildTimeout %s must be positive", c.RebuildTimeout))
	}
	if c.RebuildHistoryWait <= 0 || c.RebuildHistoryWait >= c.RebuildTimeout {
		errs = append(errs, fmt.Errorf("heartbeat: RebuildHistoryWait %s must be positive and shorter than RebuildTimeout %s",
			c.RebuildHistoryWait, c.RebuildTimeout))
	}
	if c.RestoreMemory <= 0 {
		errs = append(errs, fmt.Errorf("heartbeat: RestoreMemory %s must be positive", c.RestoreMemory))
	}
	if c.EmittedCapacity < 2 {
		errs = append(errs, fmt.Errorf("heartbeat: EmittedCapacity %d must be at least 2", c.EmittedCapacity))
	}
	return errors.Join(errs...)
}

// timing turns sightings into deadlines and back, the same way in the Tracker and
// the Daemon.
type timing struct {
	fraction float64
}

func newTiming(c Config) timing {
	return timing{fraction: max(c.CoalesceFraction, 0)}
}

// window is how long after a written sighting further sightings need no write.
func (tm timing) window(timeout time.Duration) time.Duration {
	return time.Duration(float64(timeout) * tm.fraction)
}

// span is how long after the last written sighting a sensor is declared lost: its
// timeout plus the coalescing window, so skipped sightings can never make a sensor
// look silent for less than its timeout.
func (tm timing) span(timeout time.Duration) time.Duration {
	return timeout + tm.window(timeout)
}

// deadline is when a sensor seen at seen is due, rounded up to a whole second: the
// history keeps times in whole seconds, and a lost event's time is its deadline, so a
// deadline read back from ClickHouse after a rebuild yields the same event ids.
func (tm timing) deadline(seen time.Time, timeout time.Duration) time.Time {
	return ceilSecond(seen.Add(tm.span(timeout)))
}

// lastSeen estimates when a sensor with this deadline was last seen (within the
// coalescing window and a second of rounding).
func (tm timing) lastSeen(deadline time.Time, timeout time.Duration) time.Time {
	return deadline.Add(-tm.span(timeout))
}

func ceilSecond(t time.Time) time.Time {
	t = t.UTC()
	if r := t.Truncate(time.Second); !r.Equal(t) {
		return r.Add(time.Second)
	}
	return t
}
