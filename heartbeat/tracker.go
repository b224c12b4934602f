package heartbeat

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/storage"
)

// The connections Status reports.
const (
	ConnectionOnline  = domain.ConnectionOnline
	ConnectionLost    = domain.ConnectionLost
	ConnectionUnknown = domain.ConnectionUnknown
)

// TrackerStore is the Redis side of the Tracker (RedisStore).
type TrackerStore interface {
	RecordHeartbeats(ctx context.Context, sightings []Sighting) ([]Restore, error)
	ForgetHeartbeat(ctx context.Context, sensorID string) error
	HeartbeatStatuses(ctx context.Context, sensorIDs []string) (map[string]RedisStatus, error)
	LostHeartbeats(ctx context.Context, page storage.Page) ([]Deadline, error)
	LostHeartbeatIDs(ctx context.Context, page storage.Page) ([]string, error)
	ShiftHeartbeatDeadline(ctx context.Context, sensorID string, delta time.Duration) error
	LoadHeartbeatDeadlines(ctx context.Context, deadlines []Deadline) (int, error)
}

// Timeouts gives the sensors whose heartbeat timeout differs from the fleet's
// (PostgresStore): all of them, and one sensor's when the admin API changed it
// (0: the fleet's; storage.ErrNotFound for a sensor not registered).
type Timeouts interface {
	HeartbeatTimeouts(ctx context.Context) (map[string]time.Duration, error)
	HeartbeatTimeout(ctx context.Context, sensorID string) (time.Duration, error)
}

// Coverage tells what covers a loss (PostgresStore): the maintenance
// window it fell in, or the site outage that lists it. The Tracker asks it
// about the losses it publishes itself, so they carry covered_by as the
// sweep's judgement would have marked them.
type Coverage interface {
	SensorFacts(ctx context.Context, ids []string) (map[string]SensorFact, error)
	CoverByMaintenance(ctx context.Context, sensors, sites []string, deadlines []time.Time) (map[string]string, error)
	SiteOutagesListing(ctx context.Context, losses []Deadline) (map[string]string, error)
}

// TrackerRegistry is what the Tracker reads of the registry
// (PostgresStore).
type TrackerRegistry interface {
	Timeouts
	Coverage
}

// LostSensor is a sensor that is lost now (domain.LostSensor: the console
// lists them).
type LostSensor = domain.LostSensor

// Tracker turns sightings into deadlines and ends losses. It is the consumer's
// Sightings hook and answers the API's questions about a sensor's connection. It is
// safe for concurrent use.
type Tracker struct {
	cfg      Config
	tm       timing
	store    TrackerStore
	timeouts Timeouts
	coverage Coverage
	logger   *slog.Logger

	mu       sync.Mutex // guards coalesce and emitted
	coalesce coalescer
	// emitted remembers the restores this Tracker returned (restore id → unix ms),
	// so that Redis's remembered restores are returned again only to a process
	// that may not have published them.
	emitted coalescer

	refreshMu sync.Mutex   // one timeout reload at a time
	tmu       sync.RWMutex // guards overrides and loadedAt
	overrides map[string]time.Duration
	loadedAt  time.Time

	writes   prometheus.Counter
	saved    prometheus.Counter
	restored prometheus.Counter
	replayed prometheus.Counter
}

// NewTracker returns a Tracker storing deadlines in store and reading per-sensor
// timeouts and coverage from registry. A nil logger logs nothing.
func NewTracker(cfg Config, store TrackerStore, registry TrackerRegistry, reg prometheus.Registerer, logger *slog.Logger) (*Tracker, error) {
	cfg = cfg.WithDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Tracker{
		cfg:      cfg,
		tm:       newTiming(cfg),
		store:    store,
		timeouts: registry,
		coverage: registry,
		logger:   logger,
		coalesce: newCoalescer(cfg.CoalesceCapacity),
		emitted:  newCoalescer(cfg.EmittedCapacity),
	}
	var err error
	if t.writes, err = newCounter(reg, "sighting_writes_total",
		"Sensor deadlines written to Redis."); err != nil {
		return nil, err
	}
	if t.saved, err = newCounter(reg, "sighting_writes_saved_total",
		"Sightings that needed no Redis write because the sensor's deadline was pushed recently."); err != nil {
		return nil, err
	}
	if t.restored, err = newCounter(reg, "restored_total",
		"connection_restored events emitted."); err != nil {
		return nil, err
	}
	if t.replayed, err = newCounter(reg, "restores_replayed_total",
		"connection_restored events emitted again, to a process that may have missed publishing them."); err != nil {
		return nil, err
	}
	return t, nil
}

// Record pushes the deadline of every sensor in seen (sensor id → latest server
// receive time in a batch) in one Redis round trip, skipping sensors written within
// the coalescing window, and returns one connection_restored event for each sensor
// that was lost. When that loss had been claimed by a sweep but not yet published,
// its connection_lost is returned first, so the topic never shows a restore before
// its loss (the sweep's own copy has the same id and is dropped downstream).
//
// Asked again about a sensor whose loss an earlier call ended, within RestoreMemory,
// a Tracker that has not returned that restore itself (a restarted consumer, or one
// whose earlier call failed) returns the same event again, so a crash between Record
// and producing its events loses no restore; the copies share an id.
func (t *Tracker) Record(ctx context.Context, seen map[string]time.Time) ([]event.Event, error) {
	if len(seen) == 0 {
		return nil, nil
	}
	if err := t.ensureTimeouts(ctx); err != nil {
		return nil, fmt.Errorf("recording sightings: %w", err)
	}

	writes := make([]Sighting, 0, len(seen))
	saved := 0
	t.tmu.RLock()
	t.mu.Lock()
	for id, at := range seen {
		timeout := t.timeoutLocked(id)
		if last, ok := t.coalesce.get(id); ok && at.UnixMilli() < last+t.tm.window(timeout).Milliseconds() {
			saved++
			continue
		}
		writes = append(writes, Sighting{SensorID: id, Seen: at, Deadline: t.tm.deadline(at, timeout)})
	}
	t.mu.Unlock()
	t.tmu.RUnlock()
	t.saved.Add(float64(saved))
	if len(writes) == 0 {
		return nil, nil
	}

	restores, err := t.store.RecordHeartbeats(ctx, writes)
	if err != nil {
		return nil, fmt.Errorf("recording sightings: %w", err)
	}
	t.writes.Add(float64(len(writes)))
	t.mu.Lock()
	for _, w := range writes {
		t.coalesce.put(w.SensorID, seen[w.SensorID].UnixMilli())
	}
	t.mu.Unlock()

	if len(restores) == 0 {
		return nil, nil
	}
	slices.SortFunc(restores, func(a, b Restore) int { return cmp.Compare(a.SensorID, b.SensorID) })
	timeouts := make([]time.Duration, len(restores))
	var unpublished []Deadline
	for i, r := range restores {
		timeouts[i] = t.timeout(r.SensorID)
		if r.Unpublished {
			unpublished = append(unpublished, Deadline{SensorID: r.SensorID, Deadline: r.Missed})
		}
	}
	// Redis remembers these restores: should this fail, the retried batch
	// gets them again.
	covered, err := t.cover(ctx, unpublished)
	if err != nil {
		return nil, fmt.Errorf("recording sightings: %w", err)
	}
	events := make([]event.Event, 0, len(restores))
	fresh, replayed := 0, 0
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, r := range restores {
		id := event.ConnectionRestoredID(r.SensorID, r.Missed)
		if r.Replay {
			if _, done := t.emitted.get(id); done {
				continue
			}
			replayed++
		} else {
			fresh++
		}
		if r.Unpublished {
			lost := lostEvent(r.SensorID, r.Missed)
			lost.CoveredBy = covered[r.SensorID]
			events = append(events, lost)
		}
		events = append(events, restoredEvent(r.SensorID, r.Missed, r.RestoredAt, t.tm.lastSeen(r.Missed, timeouts[i])))
		t.emitted.put(id, r.RestoredAt.UnixMilli())
	}
	t.restored.Add(float64(fresh))
	t.replayed.Add(float64(replayed))
	return events, nil
}

// cover returns, for the losses the Tracker publishes itself (their sweep
// claimed them but had not published them when the sensor came back: a slow
// or killed heartbeat), the event delivered instead of each, as the sweep's
// judgement marks it: the maintenance window's maintenance_ended, else the
// site_outage that lists it. Without this, a site outage decided by a
// heartbeat killed before publishing its losses would be followed by their
// connection_lost notifications. A few statements, only when there are such
// losses.
func (t *Tracker) cover(ctx context.Context, losses []Deadline) (map[string]string, error) {
	if len(losses) == 0 {
		return nil, nil
	}
	ids := make([]string, len(losses))
	for i, l := range losses {
		ids[i] = l.SensorID
	}
	facts, err := t.coverage.SensorFacts(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("reading the sites of %d lost sensors: %w", len(ids), err)
	}
	sites := make([]string, len(losses))
	deadlines := make([]time.Time, len(losses))
	for i, l := range losses {
		sites[i], deadlines[i] = facts[l.SensorID].Site, l.Deadline
	}
	covered, err := t.coverage.SiteOutagesListing(ctx, losses)
	if err != nil {
		return nil, err
	}
	maintained, err := t.coverage.CoverByMaintenance(ctx, ids, sites, deadlines)
	if err != nil {
		return nil, err
	}
	for sensor, window := range maintained {
		covered[sensor] = event.MaintenanceEndedID(window)
	}
	return covered, nil
}

// Status is what the heartbeat knows of one sensor's connection
// (domain.SensorConnection: the API and the console show it). For a sensor
// Redis lost and that has not reported since the rebuild, LastSeen is the
// rebuild's estimate.
type Status = domain.SensorConnection

// Status returns when the sensor was last seen and whether it is online, lost or
// unknown to the heartbeat; see SensorStatuses.
func (t *Tracker) Status(ctx context.Context, sensorID string) (lastSeen time.Time, connection string, err error) {
	st, err := t.SensorStatuses(ctx, []string{sensorID})
	if err != nil {
		return time.Time{}, "", err
	}
	return st[sensorID].LastSeen, st[sensorID].Connection, nil
}

// SensorStatuses returns the Status of every sensor in sensorIDs in one Redis round trip,
// however many there are (a page of a sensor list asks once, not once a sensor).
// Every id asked for has an entry.
func (t *Tracker) SensorStatuses(ctx context.Context, sensorIDs []string) (map[string]Status, error) {
	if err := t.ensureTimeouts(ctx); err != nil {
		return nil, fmt.Errorf("getting connections of %d sensors: %w", len(sensorIDs), err)
	}
	known, err := t.store.HeartbeatStatuses(ctx, sensorIDs)
	if err != nil {
		return nil, fmt.Errorf("getting connections of %d sensors: %w", len(sensorIDs), err)
	}
	out := make(map[string]Status, len(sensorIDs))
	for _, id := range sensorIDs {
		st := known[id]
		switch {
		case !st.Deadline.IsZero():
			out[id] = Status{LastSeen: t.lastSeen(st.Deadline, t.timeout(id)), Connection: ConnectionOnline}
		case !st.Missed.IsZero():
			out[id] = Status{LastSeen: t.lastSeen(st.Missed, t.timeout(id)), Connection: ConnectionLost}
		default:
			out[id] = Status{Connection: ConnectionUnknown}
		}
	}
	return out, nil
}

// LostSensors returns up to page.Limit lost sensors ordered by id, after
// page.After.
func (t *Tracker) LostSensors(ctx context.Context, page storage.Page) ([]LostSensor, error) {
	if err := t.ensureTimeouts(ctx); err != nil {
		return nil, fmt.Errorf("listing lost sensors: %w", err)
	}
	lost, err := t.store.LostHeartbeats(ctx, page)
	if err != nil {
		return nil, fmt.Errorf("listing lost sensors: %w", err)
	}
	out := make([]LostSensor, len(lost))
	for i, l := range lost {
		out[i] = LostSensor{
			SensorID: l.SensorID,
			LastSeen: t.lastSeen(l.Deadline, t.timeout(l.SensorID)),
			LostAt:   l.Deadline,
		}
	}
	return out, nil
}

// LostSensorIDs returns up to page.Limit ids of lost sensors ordered by id, after
// page.After, in one Redis round trip whatever the number of lost sensors: a page
// of a list whose connections are then asked for with SensorStatuses.
func (t *Tracker) LostSensorIDs(ctx context.Context, page storage.Page) ([]string, error) {
	ids, err := t.store.LostHeartbeatIDs(ctx, page)
	if err != nil {
		return nil, fmt.Errorf("listing lost sensors: %w", err)
	}
	return ids, nil
}

// Register starts tracking a newly registered sensor from its registration time, so
// one that never reports is still declared lost once its timeout has passed. A sensor
// already tracked keeps its later deadline; a lost one stays lost.
func (t *Tracker) Register(ctx context.Context, sensorID string, createdAt time.Time) error {
	if err := t.ensureTimeouts(ctx); err != nil {
		return fmt.Errorf("registering sensor %s: %w", sensorID, err)
	}
	dl := Deadline{SensorID: sensorID, Deadline: t.tm.deadline(createdAt, t.timeout(sensorID))}
	if _, err := t.store.LoadHeartbeatDeadlines(ctx, []Deadline{dl}); err != nil {
		return fmt.Errorf("registering sensor %s: %w", sensorID, err)
	}
	return nil
}

// Forget stops tracking a deleted sensor: it leaves the deadlines and the lost set.
func (t *Tracker) Forget(ctx context.Context, sensorID string) error {
	if err := t.store.ForgetHeartbeat(ctx, sensorID); err != nil {
		return fmt.Errorf("forgetting sensor %s: %w", sensorID, err)
	}
	t.mu.Lock()
	t.coalesce.forget(sensorID)
	t.mu.Unlock()
	return nil
}

// SetTimeout applies a sensor's new heartbeat timeout (0: back to the fleet's) at
// once, for PATCH /v1/sensors/{id}, called after Postgres was updated: the cached
// timeout changes and the sensor's current deadline moves by the difference. Trackers
// in other processes pick the new timeout up within TimeoutRefresh.
func (t *Tracker) SetTimeout(ctx context.Context, sensorID string, timeout time.Duration) error {
	if err := t.ensureTimeouts(ctx); err != nil {
		return fmt.Errorf("setting timeout of %s: %w", sensorID, err)
	}
	t.tmu.Lock()
	old := t.timeoutLocked(sensorID)
	if t.overrides == nil {
		t.overrides = make(map[string]time.Duration)
	}
	if timeout > 0 {
		t.overrides[sensorID] = timeout
	} else {
		delete(t.overrides, sensorID)
	}
	now := t.timeoutLocked(sensorID)
	t.tmu.Unlock()
	t.mu.Lock()
	t.coalesce.forget(sensorID)
	t.mu.Unlock()
	if delta := t.tm.span(now) - t.tm.span(old); delta != 0 {
		if err := t.store.ShiftHeartbeatDeadline(ctx, sensorID, delta.Round(time.Second)); err != nil {
			return fmt.Errorf("setting timeout of %s: %w", sensorID, err)
		}
	}
	return nil
}

// Refresh reloads the per-sensor timeouts from Postgres now.
func (t *Tracker) Refresh(ctx context.Context) error {
	overrides, err := t.timeouts.HeartbeatTimeouts(ctx)
	if err != nil {
		return fmt.Errorf("refreshing heartbeat timeouts: %w", err)
	}
	t.tmu.Lock()
	t.overrides = overrides
	t.loadedAt = t.cfg.Now()
	t.tmu.Unlock()
	return nil
}

// ensureTimeouts loads the timeouts on first use and reloads them every
// TimeoutRefresh. A failed reload keeps the timeouts already known (logged, retried
// after TimeoutRefresh) rather than stopping sightings; a failed first load is an
// error, since default timeouts for overridden sensors could declare them lost early.
func (t *Tracker) ensureTimeouts(ctx context.Context) error {
	if t.timeoutsFresh() {
		return nil
	}
	t.refreshMu.Lock()
	defer t.refreshMu.Unlock()
	if t.timeoutsFresh() {
		return nil
	}
	err := t.Refresh(ctx)
	if err == nil {
		return nil
	}
	t.tmu.Lock()
	defer t.tmu.Unlock()
	if t.loadedAt.IsZero() {
		return err
	}
	t.logger.WarnContext(ctx, "heartbeat timeouts not refreshed; using the ones loaded before", "err", err,
		"loaded_at", t.loadedAt)
	t.loadedAt = t.cfg.Now()
	return nil
}

// lastSeen estimates a sighting from its deadline; rounding the deadline up to a
// second could place it up to a second ahead, so it is kept from the future.
func (t *Tracker) lastSeen(deadline time.Time, timeout time.Duration) time.Time {
	seen := t.tm.lastSeen(deadline, timeout)
	if now := t.cfg.Now(); seen.After(now) {
		return now.UTC()
	}
	return seen
}

func (t *Tracker) timeoutsFresh() bool {
	t.tmu.RLock()
	defer t.tmu.RUnlock()
	return !t.loadedAt.IsZero() && t.cfg.Now().Sub(t.loadedAt) < t.cfg.TimeoutRefresh
}

func (t *Tracker) timeout(sensorID string) time.Duration {
	t.tmu.RLock()
	defer t.tmu.RUnlock()
	return t.timeoutLocked(sensorID)
}

// timeoutLocked needs tmu held.
func (t *Tracker) timeoutLocked(sensorID string) time.Duration {
	if d, ok := t.overrides[sensorID]; ok && d > 0 {
		return d
	}
	return t.cfg.Timeout
}

// restoredEvent is the connection_restored of a sensor seen at seen after missing
// the deadline missed, having last been seen at lastSeen before it. It is computed
// from what Redis remembers only, so a replay is the same event.
//
// It is never timed before its loss: deliveries to a client go in event-time order,
// so a restore timed earlier would reach the client before the loss it ends. A
// sighting earlier than the deadline can end a loss only if it was recorded after
// the sweep passed the deadline, which the watermark prevents unless record times
// go backwards within a partition (producer clocks on a broker that keeps them).
func restoredEvent(sensorID string, missed, seen, lastSeen time.Time) event.Event {
	at := seen
	if at.Before(missed) {
		at = missed
	}
	lostSince := lastSeen.UTC()
	return event.Event{
		ID:        event.ConnectionRestoredID(sensorID, missed),
		Type:      event.ConnectionRestored,
		SensorID:  sensorID,
		At:        at,
		SilentFor: max(0, int64(at.Sub(lastSeen)/time.Second)),
		LostSince: &lostSince,
	}
}

func lostEvent(sensorID string, deadline time.Time) event.Event {
	return event.Event{
		ID:       event.ConnectionLostID(sensorID, deadline),
		Type:     event.ConnectionLost,
		SensorID: sensorID,
		At:       deadline.UTC(),
	}
}

// coalescer remembers when each sensor's deadline was last written, in two
// generations: when the current one is full it becomes the previous one and the
// oldest generation is dropped, so memory stays bounded without per-entry
// bookkeeping.
type coalescer struct {
	limit     int
	cur, prev map[string]int64 // sensor id → unix ms of the last written sighting
}

func newCoalescer(capacity int) coalescer {
	return coalescer{limit: max(capacity/2, 1), cur: make(map[string]int64)}
}

func (c *coalescer) get(id string) (int64, bool) {
	if ms, ok := c.cur[id]; ok {
		return ms, true
	}
	ms, ok := c.prev[id]
	return ms, ok
}

func (c *coalescer) put(id string, ms int64) {
	if old, ok := c.get(id); ok && old > ms {
		ms = old // a concurrent Record wrote a newer sighting
	}
	if _, ok := c.cur[id]; !ok && len(c.cur) >= c.limit {
		c.prev, c.cur = c.cur, make(map[string]int64, c.limit)
	}
	c.cur[id] = ms
}

func (c *coalescer) forget(id string) {
	delete(c.cur, id)
	delete(c.prev, id)
}
