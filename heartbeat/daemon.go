package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/internal/contain"
)

// DaemonStore is the Redis side of the Daemon (RedisStore).
type DaemonStore interface {
	ClaimHeartbeatExpired(ctx context.Context, now time.Time, limit int, lease time.Time) ([]Deadline, error)
	ReclaimHeartbeatPending(ctx context.Context, now time.Time, limit int, lease time.Time) ([]Deadline, error)
	AckHeartbeatLosses(ctx context.Context, losses []Deadline) error
	ReleaseHeartbeatLosses(ctx context.Context, losses []Deadline) error
	CountHeartbeats(ctx context.Context) (tracked, lost int64, err error)
	HeartbeatMarker(ctx context.Context) (bool, error)
	SetHeartbeatMarker(ctx context.Context, at time.Time) error
	LockHeartbeatRebuild(ctx context.Context, ttl time.Duration) (token string, ok bool, err error)
	UnlockHeartbeatRebuild(ctx context.Context, token string) error
	LoadHeartbeatDeadlines(ctx context.Context, deadlines []Deadline) (int, error)
	LoadHeartbeatLosses(ctx context.Context, losses []Deadline) ([]Deadline, error)
	ExpireHeartbeatRestores(ctx context.Context, cutoff time.Time, limit int) (int, error)
}

// Registry lists the registered sensors for a rebuild (PostgresStore).
type Registry interface {
	EachHeartbeatSensor(ctx context.Context, fn func(RegisteredSensor) error) error
}

// History gives what the history knows about sensors for a rebuild
// (ClickHouseStore).
type History interface {
	EachLastReading(ctx context.Context, fn func(sensorID string, receivedAt time.Time) error) error
	EachOpenLoss(ctx context.Context, fn func(sensorID string, lostAt time.Time) error) error
}

// HistoryProgress tells how far the history writer has stored the events topic
// in ClickHouse, by partition offsets (stream.Backlog on the history writer's
// group, which commits a batch only after ClickHouse stored it).
type HistoryProgress interface {
	// Ends returns the end offset of each partition of the events topic now.
	Ends(ctx context.Context) (map[int32]int64, error)
	// Behind returns, for each partition of ends where the history writer has
	// not yet stored every event before the end offset, how many it has still to
	// store; empty when it has stored them all.
	Behind(ctx context.Context, ends map[int32]int64) (map[int32]int64, error)
}

// Publisher delivers events to lockstream.events. Publish returns once every event is
// durably accepted; an error means any of them may be missing.
type Publisher interface {
	Publish(ctx context.Context, events []event.Event) error
}

// Progress tells how far the state consumer has got through the readings
// (stream.Progress).
type Progress interface {
	// Watermark returns a time before which every reading has been consumed and
	// its sighting recorded in Redis; now when consumption is caught up, never
	// later. An error means it is unknown.
	Watermark(ctx context.Context, now time.Time) (time.Time, error)
}

// Deps are the Daemon's stores and its way out.
type Deps struct {
	// Store holds the heartbeat sets (RedisStore).
	Store DaemonStore
	// Registry lists registered sensors for a rebuild (PostgresStore).
	Registry Registry
	// History gives last readings and open losses for a rebuild
	// (ClickHouseStore).
	History History
	// HistoryProgress is how far the history writer has stored the events; a
	// rebuild waits (RebuildHistoryWait at most) for it to store every event
	// published before the rebuild, so that History does not lag behind the
	// losses published just before Redis lost its data. Nil reads History at
	// once, for tests and for a history written by nobody.
	HistoryProgress HistoryProgress
	// Publisher delivers connection_lost (and rebuild-found connection_restored)
	// events to lockstream.events.
	Publisher Publisher
	// Progress is how far the state consumer has got; a sweep declares lost only
	// the sensors whose deadline is at or before it, so a consumer that lags or
	// stalls never makes reporting sensors look silent. Nil judges deadlines by
	// the clock alone, for tests and for a Redis fed by no consumer.
	Progress Progress
	// States gives lost sensors' last known states for their events; nil
	// publishes losses without a state (graded warning).
	States States
	// OpenAlerts finds sensors left unlocked too long; nil turns
	// sensor_open_too_long off.
	OpenAlerts OpenAlerts
	// Sites (PostgresStore) and SiteStore (RedisStore) judge site
	// outages; with either nil, losses are published one by one.
	Sites     Sites
	SiteStore SiteStore
	// Maintenance keeps maintenance windows (PostgresStore); nil turns
	// them off.
	Maintenance Maintenance
	// Flapping finds unstable sensors quiet for a flap window
	// (PostgresStore); nil leaves ending streaks to the consumer's next
	// change.
	Flapping Flapping
}

// ErrRebuildBusy is returned by Rebuild while another daemon rebuilds; Sweep then
// skips its sweep.
var ErrRebuildBusy = errors.New("another daemon is rebuilding the heartbeat sets")

// unlockTimeout bounds releasing the rebuild lock and losses after a failure.
const unlockTimeout = 10 * time.Second

// rebuildChunk is how many rebuilt deadlines go to Redis in one pipeline.
const rebuildChunk = 50_000

// Daemon declares silent sensors lost. Every SweepInterval it claims sensors past
// their deadline, a chunk at a time, atomically, so several daemons can sweep the
// same Redis and each loss is claimed once; it publishes one connection_lost per
// claimed sensor. A claimed loss stays pending until its publication is confirmed,
// so a failed publication is retried by the next sweep. Before sweeping a Redis that
// lost its data, it rebuilds the sets from Postgres and ClickHouse.
//
// It also judges the fleet (DESIGN.md "Fleet judgement"): a loss carries the
// sensor's last state; losses of a site are held and judged together
// (site_outage, site_restored); losses inside a maintenance window are covered
// by its maintenance_ended; unlocks longer than open_alert_after become
// sensor_open_too_long; unstable sensors quiet for the flap window get their
// sensor_stable.
type Daemon struct {
	cfg    Config
	tm     timing
	deps   Deps
	logger *slog.Logger

	tracked       prometheus.Gauge
	lost          prometheus.Gauge
	lostTotal     prometheus.Counter
	restored      prometheus.Counter
	rebuilds      prometheus.Counter
	historyBehind prometheus.Counter
	sweepErrors   prometheus.Counter
	panics        *prometheus.CounterVec
	sweepDuration prometheus.Histogram
	lag           prometheus.Gauge
	lagErrors     prometheus.Counter
	openAlerts    prometheus.Counter
	siteOutages   prometheus.Counter
	siteRestored  prometheus.Counter
}

// New returns a Daemon; Run starts it. A nil logger logs nothing.
func New(cfg Config, deps Deps, reg prometheus.Registerer, logger *slog.Logger) (*Daemon, error) {
	cfg = cfg.WithDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if deps.Store == nil {
		errs = append(errs, errors.New("heartbeat: Deps.Store is nil"))
	}
	if deps.Registry == nil {
		errs = append(errs, errors.New("heartbeat: Deps.Registry is nil"))
	}
	if deps.History == nil {
		errs = append(errs, errors.New("heartbeat: Deps.History is nil"))
	}
	if deps.Publisher == nil {
		errs = append(errs, errors.New("heartbeat: Deps.Publisher is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, tm: newTiming(cfg), deps: deps, logger: logger}
	var err error
	if d.panics, err = contain.Counter(reg); err != nil {
		return nil, err
	}
	if d.tracked, err = newGauge(reg, "tracked_sensors",
		"Sensors with a heartbeat deadline, as of the last sweep."); err != nil {
		return nil, err
	}
	if d.lost, err = newGauge(reg, "lost_sensors",
		"Sensors lost now, as of the last sweep."); err != nil {
		return nil, err
	}
	if d.lostTotal, err = newCounter(reg, "lost_total",
		"connection_lost events published."); err != nil {
		return nil, err
	}
	if d.restored, err = newCounter(reg, "restored_total",
		"connection_restored events emitted."); err != nil {
		return nil, err
	}
	if d.rebuilds, err = newCounter(reg, "rebuilds_total",
		"Rebuilds of the heartbeat sets from Postgres and ClickHouse after Redis lost them."); err != nil {
		return nil, err
	}
	if d.historyBehind, err = newCounter(reg, "rebuild_history_behind_total",
		"Rebuilds that read ClickHouse before the history writer had stored every event published before them (it lagged past the rebuild's history wait, or its progress could not be read): a loss among the missing events is not put back."); err != nil {
		return nil, err
	}
	if d.sweepErrors, err = newCounter(reg, "sweep_errors_total",
		"Sweeps that failed; their work is retried by the next sweep."); err != nil {
		return nil, err
	}
	if d.lag, err = newGauge(reg, "watermark_lag_seconds",
		"How far the state consumer's progress (the watermark sweeps judge deadlines by) is behind the clock, as of the last sweep."); err != nil {
		return nil, err
	}
	if d.lagErrors, err = newCounter(reg, "watermark_errors_total",
		"Sweeps that could not learn the state consumer's progress and so declared no sensor lost."); err != nil {
		return nil, err
	}
	if d.openAlerts, err = newCounter(reg, "open_alerts_total",
		"sensor_open_too_long events published (a repeat after a crash counts again)."); err != nil {
		return nil, err
	}
	if d.siteOutages, err = newCounter(reg, "site_outages_total",
		"site_outage events published (a repeat after a crash counts again)."); err != nil {
		return nil, err
	}
	if d.siteRestored, err = newCounter(reg, "site_restored_total",
		"site_restored events published (a repeat after a crash counts again)."); err != nil {
		return nil, err
	}
	if d.sweepDuration, err = register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "sweep_duration_seconds",
		Help:    "Time a sweep took, rebuilds included.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	})); err != nil {
		return nil, err
	}
	return d, nil
}

// Run sweeps at once and then every SweepInterval until ctx is cancelled, and returns
// nil then. A failed sweep is logged and counted; the next one retries its work (a
// sweep that panicked too: counted in lockstream_panics_total{where="heartbeat_sweep"}). A
// sweep under way when ctx is cancelled still publishes and confirms the losses it
// has claimed, within PublishTimeout.
func (d *Daemon) Run(ctx context.Context) error {
	d.logger.InfoContext(ctx, "heartbeat daemon started",
		"timeout", d.cfg.Timeout, "sweep_interval", d.cfg.SweepInterval)
	ticker := time.NewTicker(d.cfg.SweepInterval)
	defer ticker.Stop()
	for {
		if err := contain.Run(ctx, "heartbeat_sweep", d.panics, d.Sweep); err != nil && ctx.Err() == nil {
			d.sweepErrors.Inc()
			d.logger.ErrorContext(ctx, "heartbeat sweep failed", "err", err)
		}
		select {
		case <-ctx.Done():
			d.logger.InfoContext(context.WithoutCancel(ctx), "heartbeat daemon stopped")
			return nil
		case <-ticker.C:
		}
	}
}

// Sweep runs one sweep: it rebuilds the sets if Redis lost them (or skips the sweep
// while another daemon rebuilds), publishes losses whose earlier publication failed,
// then claims and publishes every sensor past its deadline, and forgets restores
// older than RestoreMemory. Its cost grows with the number of expired sensors, not
// with the fleet.
//
// A deadline has passed when it is at or before the cutoff: the clock, or the state
// consumer's watermark when that is earlier, since a sighting the consumer has not
// recorded yet may still push the deadline. When the watermark is unknown, the
// sweep claims nothing, finishes the rest and returns the error.
func (d *Daemon) Sweep(ctx context.Context) error {
	start := time.Now()
	defer func() { d.sweepDuration.Observe(time.Since(start).Seconds()) }()

	built, err := d.deps.Store.HeartbeatMarker(ctx)
	if err != nil {
		return fmt.Errorf("sweeping: %w", err)
	}
	if !built {
		if err := d.Rebuild(ctx); errors.Is(err, ErrRebuildBusy) {
			d.logger.DebugContext(ctx, "heartbeat sweep skipped: another daemon is rebuilding")
			return nil
		} else if err != nil {
			return fmt.Errorf("sweeping: %w", err)
		}
	}
	if err := d.publishLosses(ctx, d.deps.Store.ReclaimHeartbeatPending, d.cfg.Now, "republished"); err != nil {
		return fmt.Errorf("sweeping: %w", err)
	}
	cutoff, werr := d.cutoff(ctx)
	if werr == nil {
		if err := d.publishLosses(ctx, d.deps.Store.ClaimHeartbeatExpired, cutoff, "claimed"); err != nil {
			return fmt.Errorf("sweeping: %w", err)
		}
		if err := d.alertOpen(ctx, cutoff); err != nil {
			return fmt.Errorf("sweeping: %w", err)
		}
		// Ended SiteHold late, so that held losses inside the window are
		// judged (covered) first.
		if err := d.sweepMaintenance(ctx, cutoff().Add(-d.cfg.SiteHold)); err != nil {
			return fmt.Errorf("sweeping maintenance windows: %w", err)
		}
		if err := d.sweepStable(ctx, cutoff()); err != nil {
			return fmt.Errorf("sweeping unstable sensors: %w", err)
		}
	}
	if err := d.sweepSites(ctx); err != nil {
		return fmt.Errorf("sweeping sites: %w", err)
	}
	expiry := d.cfg.Now().Add(-d.cfg.RestoreMemory)
	for {
		n, err := d.deps.Store.ExpireHeartbeatRestores(ctx, expiry, d.cfg.ClaimBatch)
		if err != nil {
			return fmt.Errorf("sweeping: %w", err)
		}
		if n < d.cfg.ClaimBatch {
			break
		}
	}
	tracked, lost, err := d.deps.Store.CountHeartbeats(ctx)
	if err != nil {
		return fmt.Errorf("sweeping: %w", err)
	}
	d.tracked.Set(float64(tracked))
	d.lost.Set(float64(lost))
	if werr != nil {
		return fmt.Errorf("sweeping: no sensor declared lost: %w", werr)
	}
	return nil
}

// cutoff returns the sweep's deadline cutoff: a function giving the earlier of the
// clock and the state consumer's watermark, the watermark read once per sweep.
func (d *Daemon) cutoff(ctx context.Context) (func() time.Time, error) {
	if d.deps.Progress == nil {
		return d.cfg.Now, nil
	}
	now := d.cfg.Now()
	mark, err := d.deps.Progress.Watermark(ctx, now)
	if err != nil {
		d.lagErrors.Inc()
		return nil, fmt.Errorf("reading the state consumer's progress: %w", err)
	}
	d.lag.Set(max(0, now.Sub(mark).Seconds()))
	return func() time.Time {
		if now := d.cfg.Now(); now.Before(mark) {
			return now
		}
		return mark
	}, nil
}

type claimFunc func(ctx context.Context, now time.Time, limit int, lease time.Time) ([]Deadline, error)

// publishLosses claims losses due at cutoff a chunk at a time and publishes each
// chunk, until a chunk comes back short. Leases run on the clock.
func (d *Daemon) publishLosses(ctx context.Context, claim claimFunc, cutoff func() time.Time, what string) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		lease := d.cfg.Now().Add(2 * d.cfg.PublishTimeout)
		losses, err := claim(ctx, cutoff(), d.cfg.ClaimBatch, lease)
		if err != nil {
			return err
		}
		if len(losses) == 0 {
			return nil
		}
		if err := d.publish(ctx, losses); err != nil {
			return err
		}
		d.logger.InfoContext(ctx, "heartbeat losses published", "how", what, "sensors", len(losses))
		if len(losses) < d.cfg.ClaimBatch {
			return nil
		}
	}
}

// publish publishes claimed losses and confirms them. It runs even when ctx is
// cancelled (within PublishTimeout): the losses are claimed already. On failure the
// losses are released for the next sweep.
func (d *Daemon) publish(ctx context.Context, losses []Deadline) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.PublishTimeout)
	defer cancel()
	j, err := d.judge(pctx, losses)
	if err == nil && len(j.events) > 0 {
		err = d.deps.Publisher.Publish(pctx, j.events)
	}
	if err != nil {
		err = fmt.Errorf("publishing %d lost events: %w", len(losses), err)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		if rerr := d.deps.Store.ReleaseHeartbeatLosses(rctx, losses); rerr != nil {
			// Their lease still runs out: they are published after it.
			return errors.Join(err, rerr)
		}
		return err
	}
	for _, e := range j.events {
		if e.Type == event.ConnectionLost {
			d.logger.DebugContext(ctx, "sensor lost", "sensor_id", e.SensorID, "deadline", e.At, "covered_by", e.CoveredBy)
		}
	}
	d.lostTotal.Add(float64(len(j.ready)))
	d.siteOutages.Add(float64(len(j.opened)))
	if d.sitesOn() {
		if err := d.deps.Sites.MarkSiteEventsPublished(pctx, j.opened, false, d.cfg.Now()); err != nil {
			return fmt.Errorf("recording %d site outages published: %w", len(j.opened), err)
		}
	}
	if err := d.deps.Store.AckHeartbeatLosses(pctx, j.ready); err != nil {
		// Published but not confirmed: published again after the lease, under the
		// same ids, which downstream drops.
		return fmt.Errorf("confirming %d published losses: %w", len(j.ready), err)
	}
	return nil
}

// Rebuild rebuilds the Redis sets from the durable stores, for a Redis that lost them
// (or never had them). Sweep calls it when the marker is missing; only one daemon
// rebuilds at a time.
//
// Each registered sensor's last sighting is the later of its registration and its
// last reading in ClickHouse. A sensor whose latest connection event in the history is
// a loss not followed by a reading is lost again, under the same deadline, so its
// next reading yields the restore with the same id. The history lags behind the
// events topic (the history writer stores and commits in batches), so before
// reading it the rebuild waits, RebuildHistoryWait at most, until the history
// writer has stored every event published before the rebuild began
// (Deps.HistoryProgress): a loss published just before Redis lost its data is then
// put back too. Past the wait it reads what ClickHouse has, logs a warning and
// counts it (lockstream_heartbeat_rebuild_history_behind_total). A sensor whose
// rebuilt deadline has already passed is NOT declared lost: the readings' history
// may lag behind the stream too, so it gets a fresh full timeout from now, as if
// seen at the rebuild; a healthy sensor reports within it, a silent one is
// declared lost at its end. A rebuild therefore
// never makes the fleet look lost, at the cost of one extra timeout for sensors that
// fell silent around the time Redis lost its data. Unregistered sensors are tracked
// again from their next reading. Sightings recorded while the rebuild runs are kept:
// deadlines only move forward.
func (d *Daemon) Rebuild(ctx context.Context) error {
	token, ok, err := d.deps.Store.LockHeartbeatRebuild(ctx, d.cfg.RebuildTimeout)
	if err != nil {
		return fmt.Errorf("rebuilding heartbeat sets: %w", err)
	}
	if !ok {
		return ErrRebuildBusy
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		if err := d.deps.Store.UnlockHeartbeatRebuild(uctx, token); err != nil {
			d.logger.WarnContext(uctx, "heartbeat rebuild lock not released; it expires by itself", "err", err)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, d.cfg.RebuildTimeout)
	defer cancel()
	if err := d.rebuild(ctx); err != nil {
		return fmt.Errorf("rebuilding heartbeat sets: %w", err)
	}
	return nil
}

// rebuild reads what Postgres and ClickHouse know, puts the open losses back
// (emitting the restores Redis missed), then the deadlines, and sets the marker
// last, so that a failure anywhere is retried by the next sweep.
func (d *Daemon) rebuild(ctx context.Context) error {
	start := time.Now()
	d.logger.WarnContext(ctx, "heartbeat sets missing in Redis; rebuilding them from Postgres and ClickHouse")
	if err := d.waitForHistory(ctx); err != nil {
		return err
	}
	known, err := d.rebuildSources(ctx)
	if err != nil {
		return err
	}
	restored, err := d.reloadLosses(ctx, known)
	if err != nil {
		return err
	}
	now := d.cfg.Now()
	loaded, overdue, err := d.reloadDeadlines(ctx, known, now)
	if err != nil {
		return err
	}
	if err := d.deps.Store.SetHeartbeatMarker(ctx, now); err != nil {
		return err
	}
	d.rebuilds.Inc()
	d.logger.WarnContext(ctx, "heartbeat sets rebuilt",
		"sensors", len(known.lastSeen), "deadlines", loaded, "overdue_given_full_timeout", overdue,
		"lost", len(known.missed)-restored, "restored", restored, "took", time.Since(start))
	return nil
}

// Bounds of the back-off between polls of the history writer's progress.
const (
	historyPollMin = 50 * time.Millisecond
	historyPollMax = time.Second
)

// waitForHistory waits until the history writer has stored every event published
// before it was called, so that the open losses read from ClickHouse include those
// published just before Redis lost its data. It polls with a back-off, for
// RebuildHistoryWait at most; when the history writer has not caught up by then
// (it may not run), or its progress could not be read, it logs a warning naming
// the gap, counts it, and returns nil all the same: the rebuild goes on with what
// ClickHouse has. It returns an error only when ctx ends.
func (d *Daemon) waitForHistory(ctx context.Context) error {
	hp := d.deps.HistoryProgress
	if hp == nil {
		return nil
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, d.cfg.RebuildHistoryWait)
	defer cancel()
	var ends, behind map[int32]int64
	var err error
	for backoff := historyPollMin; ; backoff = min(2*backoff, historyPollMax) {
		if ends == nil {
			ends, err = hp.Ends(wctx)
		}
		if ends != nil {
			var b map[int32]int64
			if b, err = hp.Behind(wctx, ends); err == nil {
				behind = b // the last known gap, for the warning
			}
			if err == nil && len(behind) == 0 {
				d.logger.InfoContext(ctx, "history writer has stored every event published before the rebuild",
					"waited", time.Since(start))
				return nil
			}
		}
		timer := time.NewTimer(backoff)
		select {
		case <-wctx.Done():
			timer.Stop()
			if cerr := ctx.Err(); cerr != nil {
				return fmt.Errorf("waiting for the history writer: %w", cerr)
			}
			d.historyBehind.Inc()
			attrs := []any{"waited", time.Since(start)}
			if ends == nil {
				attrs = append(attrs, "events_not_stored", "unknown")
			} else if behind != nil {
				var n int64
				for _, b := range behind {
					n += b
				}
				attrs = append(attrs, "events_not_stored", n, "by_partition", behind)
			}
			if err != nil {
				attrs = append(attrs, "err", err)
			}
			d.logger.WarnContext(ctx, "heartbeat rebuild reads ClickHouse before the history writer stored every event "+
				"published before it: a loss among those events is not put back (its sensor gets a fresh deadline)", attrs...)
			return nil
		case <-timer.C:
		}
	}
}

// rebuildState is what a rebuild knows of the registered sensors.
type rebuildState struct {
	lastSeen map[string]time.Time     // last reading, or registration when none
	timeouts map[string]time.Duration // per-sensor timeouts that differ from the default
	missed   map[string]time.Time     // open losses: the deadline each missed
	fallback time.Duration            // the default timeout
}

func (r *rebuildState) timeout(id string) time.Duration {
	if t, ok := r.timeouts[id]; ok {
		return t
	}
	return r.fallback
}

// rebuildSources reads the registered sensors and their timeouts from Postgres,
// and their last readings and open losses from ClickHouse.
func (d *Daemon) rebuildSources(ctx context.Context) (*rebuildState, error) {
	r := &rebuildState{lastSeen: make(map[string]time.Time), timeouts: make(map[string]time.Duration),
		missed: make(map[string]time.Time), fallback: d.cfg.Timeout}
	err := d.deps.Registry.EachHeartbeatSensor(ctx, func(s RegisteredSensor) error {
		r.lastSeen[s.ID] = s.CreatedAt
		if s.Timeout > 0 {
			r.timeouts[s.ID] = s.Timeout
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = d.deps.History.EachLastReading(ctx, func(id string, at time.Time) error {
		if seen, ok := r.lastSeen[id]; ok && at.After(seen) {
			r.lastSeen[id] = at
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = d.deps.History.EachOpenLoss(ctx, func(id string, lostAt time.Time) error {
		if seen, ok := r.lastSeen[id]; ok && seen.Before(lostAt) {
			r.missed[id] = lostAt
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// reloadLosses puts the open losses back in Redis and publishes the restores of
// the sensors that reported since, returning how many it published.
func (d *Daemon) reloadLosses(ctx context.Context, r *rebuildState) (int, error) {
	losses := make([]Deadline, 0, len(r.missed))
	for id, at := range r.missed {
		losses = append(losses, Deadline{SensorID: id, Deadline: at})
	}
	reported, err := d.deps.Store.LoadHeartbeatLosses(ctx, losses)
	if err != nil {
		return 0, err
	}
	// These reported after Redis lost their loss, so no restore was detected: emit it
	// now, before the marker is set, so a failure here is retried by the next sweep.
	if len(reported) == 0 {
		return 0, nil
	}
	events := make([]event.Event, len(reported))
	for i, rep := range reported {
		tmo := r.timeout(rep.SensorID)
		events[i] = restoredEvent(rep.SensorID, r.missed[rep.SensorID],
			d.tm.lastSeen(rep.Deadline, tmo), d.tm.lastSeen(r.missed[rep.SensorID], tmo))
	}
	pctx, cancel := context.WithTimeout(ctx, d.cfg.PublishTimeout)
	defer cancel()
	if err := d.deps.Publisher.Publish(pctx, events); err != nil {
		return 0, fmt.Errorf("publishing %d restores found by the rebuild: %w", len(events), err)
	}
	d.restored.Add(float64(len(events)))
	return len(events), nil
}

// reloadDeadlines loads a deadline for every sensor not lost, in chunks; one
// already past gets a full timeout from now (see Rebuild). It returns how many
// deadlines it loaded and how many were overdue.
func (d *Daemon) reloadDeadlines(ctx context.Context, r *rebuildState, now time.Time) (loaded, overdue int, err error) {
	deadlines := make([]Deadline, 0, len(r.lastSeen))
	for id, seen := range r.lastSeen {
		if _, ok := r.missed[id]; ok {
			continue
		}
		dl := d.tm.deadline(seen, r.timeout(id))
		if !dl.After(now) {
			dl = d.tm.deadline(now, r.timeout(id))
			overdue++
		}
		deadlines = append(deadlines, Deadline{SensorID: id, Deadline: dl})
	}
	for start := 0; start < len(deadlines); start += rebuildChunk {
		n, err := d.deps.Store.LoadHeartbeatDeadlines(ctx, deadlines[start:min(start+rebuildChunk, len(deadlines))])
		if err != nil {
			return loaded, overdue, err
		}
		loaded += n
	}
	return loaded, overdue, nil
}
