// Package fanout turns events into outbox rows: for each event on
// lockstream.events, one notification per client linked to its sensor and one
// delivery per channel, written in one transaction per batch before the batch is
// committed.
package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/internal/contain"
	"github.com/lockstream/lockstream/internal/metrics"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/stream"
)

// Defaults of Config.
const (
	DefaultGroup         = "lockstream-fanout"
	DefaultMaxBatch      = 1000
	DefaultWriteTimeout  = 30 * time.Second
	DefaultRetryBackoff  = time.Second
	DefaultCommitTimeout = 10 * time.Second
	DefaultQueueBatches  = 64
	DefaultWriters       = 1
	// DefaultInboxCopyDelay is how long after a shared inbox message's commit
	// the fan-out writes its members' own copies: long enough that the live
	// streams, which hear the message at its commit, have the CPU to
	// themselves (10,000 streams took 150-300 ms on 2 cores while the copies
	// competed; see Config.InboxCopyDelay).
	DefaultInboxCopyDelay = 500 * time.Millisecond

	// DefaultHandoffWait is how long a batch waits, at most, for the sender
	// in its process to free places (see Config.HandoffWait).
	DefaultHandoffWait = 200 * time.Millisecond
)

// Config configures a Fanout.
type Config struct {
	// Stream says where Kafka is and names the events topic. Its Brokers are
	// required.
	Stream stream.Config

	// Group is the consumer group the fan-out processes share. Defaults to
	// DefaultGroup ("lockstream-fanout").
	Group string

	// MaxBatch bounds the events one poll takes over all partitions; each
	// partition's share is one transaction. Defaults to DefaultMaxBatch (1000).
	MaxBatch int

	// WriteTimeout bounds one batch's transaction. Defaults to
	// DefaultWriteTimeout (30s).
	WriteTimeout time.Duration

	// RetryBackoff is the wait before a failed batch is written again. A batch is
	// retried until it is written (or shutdown), never skipped: that would lose
	// notifications. Defaults to DefaultRetryBackoff (1s).
	RetryBackoff time.Duration

	// CommitTimeout is added to WriteTimeout to bound how long shutdown or a
	// revoke waits for the batches in flight and commits their offsets.
	// Defaults to DefaultCommitTimeout (10s).
	CommitTimeout time.Duration

	// QueueBatches bounds the partitions' batches waiting for each writer; a
	// partition's worker waits when its writer's queue is full. Defaults to
	// DefaultQueueBatches (64).
	QueueBatches int

	// Writers is how many transactions the process writes at once; each
	// partition has one writer, so its order holds. Defaults to
	// DefaultWriters (1: on 2 cores, two writers delivered no more webhooks a
	// second in the pipeline benchmark and raised the latency, as the writers
	// queue on a client's seq lock; more cores may want more).
	Writers int

	// Handoff, when not nil, is the webhook sender running in this process
	// (retrier.Retrier, in `lockstream all`): each transaction creates as many
	// webhook deliveries claimed as it has free workers (see Claim), and
	// hands them over once committed, so they are sent without a claim, a
	// NOTIFY or a poll. Not a setting. Defaults to nil: every delivery is
	// created PENDING for the retriers to claim.
	Handoff Handoff

	// HandoffWait is how long, at most, a batch's transactions wait for the
	// Handoff's sender to free places when a burst outruns it (see reserve):
	// the burst's webhooks wait in the stream rather than as PENDING rows.
	// Zero: no wait, what has no place is written PENDING at once (for
	// retrier processes beside this one: the wait gives a burst to the
	// sender in this process). The setting's default is DefaultHandoffWait.
	HandoffWait time.Duration

	// InboxCopyDelay is how long the fan-out waits, after a commit that wrote
	// shared inbox messages, before it writes every member's own copy of them
	// (inbox.MaterializeShared), off its writers' path: one transaction for
	// all the copies pending then, while the writers go on. Nothing waits for
	// the copies: a member's stream heard the message at the commit, and any
	// read of a member's inbox, or an escalation round, writes that member's
	// copies first. Defaults to DefaultInboxCopyDelay (500ms) when zero.
	InboxCopyDelay time.Duration

	// Now returns the current time, which decides the months whose inbox
	// partitions are made ahead; tests inject a clock. Defaults to time.Now.
	Now func() time.Time
}

// Handoff is a sender in the fan-out's process that takes deliveries the
// fan-out created claimed (retrier.Retrier).
type Handoff interface {
	// Reserve takes up to n of the sender's places (free workers and a
	// backlog waiting for them) for deliveries about to be created claimed,
	// and says when their lease is to end; 0 when it has none or is
	// stopping. Every reserved place is given back by Deliver or Release.
	Reserve(n int) (int, time.Time)
	// Release gives back n reserved places the transaction did not use, or
	// whose transaction failed.
	Release(n int)
	// Deliver starts the attempts of committed claimed deliveries, one
	// reserved place each, with their targets as the transaction read them.
	// It does not block on the attempts.
	Deliver(claimed []storage.Delivery, targets map[string]storage.DeliveryTarget)
	// Capacity is how many places the sender has in all, free or not.
	Capacity() int
	// SendsEmail reports whether the places Reserve takes also send emails,
	// so the fan-out may hand emails over too.
	SendsEmail() bool
}

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	c.Stream = c.Stream.WithDefaults()
	c.Group = cmp.Or(c.Group, DefaultGroup)
	c.MaxBatch = cmp.Or(c.MaxBatch, DefaultMaxBatch)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, DefaultWriteTimeout)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, DefaultRetryBackoff)
	c.CommitTimeout = cmp.Or(c.CommitTimeout, DefaultCommitTimeout)
	c.QueueBatches = cmp.Or(c.QueueBatches, DefaultQueueBatches)
	c.Writers = cmp.Or(c.Writers, DefaultWriters)
	c.InboxCopyDelay = cmp.Or(c.InboxCopyDelay, DefaultInboxCopyDelay)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports every field of c that is out of range, naming it.
func (c Config) Validate() error {
	var errs []error
	if err := c.Stream.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("fanout: Stream: %w", err))
	}
	if c.Group == "" {
		errs = append(errs, errors.New("fanout: Group is empty"))
	}
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("fanout: MaxBatch %d must be at least 1", c.MaxBatch))
	}
	if c.WriteTimeout <= 0 {
		errs = append(errs, fmt.Errorf("fanout: WriteTimeout %s must be positive", c.WriteTimeout))
	}
	if c.RetryBackoff <= 0 {
		errs = append(errs, fmt.Errorf("fanout: RetryBackoff %s must be positive", c.RetryBackoff))
	}
	if c.CommitTimeout <= 0 {
		errs = append(errs, fmt.Errorf("fanout: CommitTimeout %s must be positive", c.CommitTimeout))
	}
	if c.QueueBatches < 1 {
		errs = append(errs, fmt.Errorf("fanout: QueueBatches %d must be at least 1", c.QueueBatches))
	}
	if c.Writers < 1 {
		errs = append(errs, fmt.Errorf("fanout: Writers %d must be at least 1", c.Writers))
	}
	if c.HandoffWait < 0 {
		errs = append(errs, fmt.Errorf("fanout: HandoffWait %s must not be negative", c.HandoffWait))
	}
	if c.InboxCopyDelay < 0 {
		errs = append(errs, fmt.Errorf("fanout: InboxCopyDelay %s must not be negative", c.InboxCopyDelay))
	}
	if c.Now == nil {
		errs = append(errs, errors.New("fanout: Now is nil"))
	}
	return errors.Join(errs...)
}

// NotificationStore creates the outbox rows for events, and makes the
// inbox_messages partitions their messages go to (PostgresStore).
type NotificationStore interface {
	InboxPartitions
	// CreateNotificationsClaiming creates the rows of events, up to
	// claim.Max webhook or email deliveries of them claimed (see Claim).
	CreateNotificationsClaiming(ctx context.Context, events []storage.NotificationInput, claim Claim) (NotificationsCreated, error)
	// AnalyzeOutboxMonth refreshes the planner statistics of a month's outbox
	// partitions, which CreateNotifications says are due after a burst.
	AnalyzeOutboxMonth(ctx context.Context, month string) error
	// CopySharedInboxMessages writes every member's own copy of the shared
	// inbox messages not yet copied, and says how many it wrote.
	CopySharedInboxMessages(ctx context.Context) (int, error)
}

// Fanout consumes lockstream.events in its own consumer group and creates, in
// one transaction, a notification per (event, linked client), a delivery per
// channel and a message in the inbox of each of the client's members,
// superseding older undelivered states; it commits a batch's offsets only
// after that transaction. The partitions' workers hand their batches to a
// writer (Writers of them, each partition always to the same one), which
// writes whatever has queued up (up to MaxBatch events) in one transaction, in
// the order the batches came: a few transactions at a time per process rather
// than one per partition, so the partitions neither queue on each other's
// locks (a client's seq counter is locked to commit) nor pay a commit each. Replays create
// nothing (event ids are deterministic), so at-least-once consumption yields
// exactly one delivery per (event, client, channel, target). Records that do not
// decode are logged, counted and skipped. The fan-out, the only writer of event
// messages into inbox_messages, also keeps that table's month partitions made
// InboxPartitionsAhead months ahead (see Run): the table has no DEFAULT
// partition, and the fan-out must not depend on `lockstream maintain` running.
type Fanout struct {
	cfg    Config
	store  NotificationStore
	logger *slog.Logger

	events        prometheus.Counter
	rejected      *prometheus.CounterVec
	covered       prometheus.Counter
	notifications prometheus.Counter
	inbox         prometheus.Counter
	created       *prometheus.CounterVec
	deliveries    *prometheus.CounterVec
	writeErrors   prometheus.Counter
	filtered      prometheus.Counter
	batchDuration prometheus.Histogram
	group         *stream.Group
	queues        []chan submission // the partitions' batches, one queue per writer
	// analyze holds the months to analyze, for analyzeLoop: an ANALYZE takes
	// tens of milliseconds, which a writer would add to every event behind it.
	analyze chan string
	// copies wakes copyLoop when a commit left shared inbox messages to copy.
	copies chan struct{}
	copied prometheus.Counter
	// handoffWait is the time transactions waited for the Handoff's places.
	handoffWait prometheus.Counter
	copyErrors  prometheus.Counter
}

// submission is a partition's batch handed to the writer: done is closed once
// its rows are committed.
type submission struct {
	inputs []storage.NotificationInput
	start  time.Time
	done   chan struct{}
}

// New returns a Fanout; Run starts it. A nil logger logs nothing.
func New(cfg Config, store NotificationStore, reg prometheus.Registerer, logger *slog.Logger) (*Fanout, error) {
	cfg = cfg.WithDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if store == nil {
		errs = append(errs, errors.New("fanout: the NotificationStore is nil"))
	}
	if reg == nil {
		errs = append(errs, errors.New("fanout: the Registerer is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	f := &Fanout{cfg: cfg, store: store, logger: logger, analyze: make(chan string, 16),
		copies: make(chan struct{}, 1)}
	for range cfg.Writers {
		f.queues = append(f.queues, make(chan submission, cfg.QueueBatches))
	}
	var err error
	if f.group, err = stream.NewGroup(stream.GroupConfig{Stream: cfg.Stream, Group: cfg.Group,
		Topics: []string{cfg.Stream.EventsTopic()}, MaxPollRecords: cfg.MaxBatch,
		DrainTimeout: cfg.WriteTimeout + cfg.CommitTimeout, ClientName: "fanout"}, f, reg, logger); err != nil {
		return nil, fmt.Errorf("fanout: %w", err)
	}
	if err := f.registerMetrics(reg); err != nil {
		return nil, err
	}
	return f, nil
}

// registerMetrics creates the fan-out's metrics on reg.
func (f *Fanout) registerMetrics(reg prometheus.Registerer) error {
	var err error
	if f.events, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "fanout_events_total",
		Help: "Events the fan-out consumed and wrote to the outbox.",
	})); err != nil {
		return err
	}
	if f.rejected, err = metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "fanout_rejected_total",
		Help: "Records on the events topic the fan-out skipped, by reason.",
	}, []string{"reason"})); err != nil {
		return err
	}
	if f.covered, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "fanout_covered_total",
		Help: "Events notified to nobody: losses a site_outage or maintenance_ended is delivered instead of, changes of unstable sensors.",
	})); err != nil {
		return err
	}
	if f.notifications, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "notifications_created_total",
		Help: "Notifications created: one per event and client watching its sensor.",
	})); err != nil {
		return err
	}
	if f.inbox, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "inbox_messages_created_total",
		Help: "Messages put in members' inboxes: one per notification and member of its client.",
	})); err != nil {
		return err
	}
	if f.created, err = metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "deliveries_created_total",
		Help: "Deliveries created in the outbox, by channel.",
	}, []string{"channel"})); err != nil {
		return err
	}
	if f.deliveries, err = metrics.NewDeliveriesTotal(reg); err != nil {
		return err
	}
	if f.writeErrors, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "fanout_write_errors_total",
		Help: "Failed outbox transactions of the fan-out; each batch is retried until written.",
	})); err != nil {
		return err
	}
	if f.filtered, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "fanout_filtered_total",
		Help: "Notifications not created because the client is not subscribed to the event's type (event_types); replays count again.",
	})); err != nil {
		return err
	}
	if f.handoffWait, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "fanout_handoff_wait_seconds_total",
		Help: "Time transactions waited for the webhook sender in the process to free places, when a burst outran it.",
	})); err != nil {
		return err
	}
	if f.copied, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "fanout_inbox_copies_total",
		Help: "Members' own copies of shared inbox messages the fan-out wrote, InboxCopyDelay after their commit.",
	})); err != nil {
		return err
	}
	if f.copyErrors, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "fanout_inbox_copy_errors_total",
		Help: "Failed transactions writing members' copies of shared inbox messages; retried after the retry backoff.",
	})); err != nil {
		return err
	}
	if f.batchDuration, err = metrics.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Name: "fanout_batch_duration_seconds",
		Help:    "Time from polling a batch of events to committing it, retries included.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	})); err != nil {
		return err
	}
	return nil
}

// Run consumes until ctx is cancelled and returns nil then. The batches
// handed to the writer when ctx is cancelled are written and committed first,
// on a context that is not cancelled (bounded by WriteTimeout and
// CommitTimeout). It returns an error when Kafka cannot be reached at start.
// Before it consumes, it makes the inbox partitions of this month and the
// InboxPartitionsAhead after it (by Now), and again every
// InboxPartitionsInterval while it runs; a failure is logged and tried again
// a minute later, and does not stop the fan-out (the partitions made before
// are likely there still).
func (f *Fanout) Run(ctx context.Context) error {
	nextPartitions := f.createInboxPartitions(ctx)
	// The writers outlive the group: the group's shutdown waits for the
	// batches it handed over.
	writerCtx, stopWriters := context.WithCancel(context.WithoutCancel(ctx))
	partitionsCtx, stopPartitions := context.WithCancel(ctx)
	var writers, helpers sync.WaitGroup
	for _, queue := range f.queues {
		writers.Go(func() { f.writeLoop(writerCtx, queue) })
	}
	helpers.Go(func() { f.analyzeLoop(writerCtx) })
	helpers.Go(func() { f.copyLoop(writerCtx) })
	helpers.Go(func() { f.inboxPartitionsLoop(partitionsCtx, nextPartitions) })
	err := f.group.Run(ctx)
	stopPartitions()
	stopWriters()
	writers.Wait()
	helpers.Wait()
	return err
}

// Assigned returns the handler of a partition the group assigned
// (stream.Handler): the fan-out keeps nothing per partition.
func (f *Fanout) Assigned(*kgo.Client, string, int32) stream.PartitionHandler { return f }

// Close does nothing: the fan-out keeps nothing per partition.
func (f *Fanout) Close() {}

// Handle hands one partition's batch to the writer (stream.PartitionHandler)
// and returns at once; the Pending is closed when the batch's rows are
// committed. Events of one sensor share a partition and the writer keeps the
// order batches came in, so their order holds across transactions. It waits
// while the writer's queue is full, and returns an error (the batch is not
// committed, and is consumed again) only if ctx is cancelled meanwhile.
func (f *Fanout) Handle(ctx context.Context, b stream.Batch) (stream.Pending, error) {
	start := time.Now()
	inputs := f.decode(ctx, b.Records)
	if len(inputs) == 0 {
		return nil, nil
	}
	sub := submission{inputs: inputs, start: start, done: make(chan struct{})}
	select {
	case f.queues[int(b.Partition)%len(f.queues)] <- sub:
		return sub.done, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// decode turns the batch's records into the outbox's inputs, skipping (and
// counting) those that do not decode and the events notified to nobody.
func (f *Fanout) decode(ctx context.Context, records []*kgo.Record) []storage.NotificationInput {
	inputs := make([]storage.NotificationInput, 0, len(records))
	for _, r := range records {
		e, err := event.Decode(r.Value)
		if err != nil {
			f.rejected.WithLabelValues("decode").Inc()
			f.logger.WarnContext(ctx, "skipping an event that does not decode",
				"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			continue
		}
		if e.CoveredBy != "" || e.Held {
			// A loss a site_outage or maintenance_ended is delivered instead
			// of, or a change of an unstable sensor (its sensor_stable brings
			// the final state): history keeps it.
			f.covered.Inc()
			continue
		}
		inputs = append(inputs, storage.NotificationInput{
			EventID: e.ID, Type: string(e.Type), SensorID: e.SensorID, Data: e.Data, Previous: e.Previous, At: e.At,
			Site: e.Site, Sensors: e.Sensors, LostSince: e.LostSince,
		})
	}
	return inputs
}

// writeLoop writes the queued batches, as many as are waiting (up to MaxBatch
// events) in one transaction, until ctx is cancelled. A write that fails is
// retried, with nothing after it written first; when ctx is cancelled during
// the retries, its batches stay unmarked and are consumed again.
func (f *Fanout) writeLoop(ctx context.Context, queue chan submission) {
	var next *submission // taken from the queue, but too big for the last transaction
	for {
		first := next
		if first == nil {
			select {
			case sub := <-queue:
				first = &sub
			case <-ctx.Done():
				return
			}
		}
		var subs []submission
		subs, next = f.gather(queue, *first)
		inputs := subs[0].inputs
		if len(subs) > 1 {
			inputs = nil
			for _, sub := range subs {
				inputs = append(inputs, sub.inputs...)
			}
		}
		if err := f.write(ctx, inputs); err != nil {
			return
		}
		for _, sub := range subs {
			f.batchDuration.Observe(time.Since(sub.start).Seconds())
			close(sub.done)
		}
	}
}

// gather returns first and the batches queued behind it that fit with it in
// MaxBatch events (first always goes), and the batch it took from the queue
// that did not fit, if any: that one leads the next transaction.
func (f *Fanout) gather(queue chan submission, first submission) (subs []submission, next *submission) {
	subs, events := []submission{first}, len(first.inputs)
	for {
		select {
		case sub := <-queue:
			if events+len(sub.inputs) > f.cfg.MaxBatch {
				return subs, &sub
			}
			subs, events = append(subs, sub), events+len(sub.inputs)
		default:
			return subs, nil
		}
	}
}

// write creates the outbox rows of inputs, retrying until it succeeds or ctx
// is cancelled. With a Handoff, it writes them in as many transactions as
// the sender's places ask for (see reserve).
func (f *Fanout) write(ctx context.Context, inputs []storage.NotificationInput) error {
	deadline := f.cfg.Now().Add(f.cfg.HandoffWait)
	for len(inputs) > 0 {
		r := f.reserve(ctx, len(inputs), deadline)
		n := len(inputs)
		if !r.last {
			n = r.places
		}
		if err := f.writeRetrying(ctx, inputs[:n], r); err != nil {
			return err
		}
		inputs = inputs[n:]
	}
	return nil
}

// reservation is what reserve took of the Handoff for a transaction.
type reservation struct {
	places int
	until  time.Time
	// last: the transaction writes every event left, whatever the places.
	last bool
}

// reserve takes the Handoff's places for up to n events, one each (most
// events reach one client). When a burst outruns the sender, a transaction
// writes only as many events as it has places for, after waiting for the
// sender to free handoffShare of its places (or n): the rest of the burst
// waits in the stream, not as PENDING rows a claim must find, lock and update
// again (about 600 bytes of WAL each), and waiting for a share rather than
// one place keeps each transaction large enough to be cheap. A sender that
// frees no place for handoffStall ends the wait, so a slow endpoint holding
// every worker delays a transaction by that much at most; then, and past the
// deadline, the events left are written in one transaction, those without a
// place PENDING.
func (f *Fanout) reserve(ctx context.Context, n int, deadline time.Time) reservation {
	if f.cfg.Handoff == nil {
		return reservation{last: true}
	}
	var r reservation
	r.places, r.until = f.cfg.Handoff.Reserve(n)
	if f.cfg.HandoffWait == 0 {
		r.last = true
		return r
	}
	want := min(n, max(1, int(float64(f.cfg.Handoff.Capacity())*handoffShare)))
	start := f.cfg.Now()
	defer func() { f.handoffWait.Add(f.cfg.Now().Sub(start).Seconds()) }()
	for stalled := time.Duration(0); r.places < want; {
		if stalled >= handoffStall || !f.cfg.Now().Before(deadline) || !contain.Sleep(ctx, handoffPoll) {
			r.last = true
			return r
		}
		more, until := f.cfg.Handoff.Reserve(n - r.places)
		if more == 0 {
			stalled += handoffPoll
			continue
		}
		if r.places == 0 {
			r.until = until
		}
		r.places, stalled = r.places+more, 0
	}
	r.last = r.places >= n
	return r
}

// The hand-over's wait (reserve): a transaction waits for handoffShare of
// the sender's places, looking every handoffPoll, and stops after
// handoffStall without one. 0.4: 512 of the default 1,280 places; with one
// client of ten failing, 64 places gave the healthy nine 18 % fewer
// webhooks a second than 512 (bench/RESULTS.md, 2026-11-27).
const (
	handoffShare = 0.4
	handoffPoll  = time.Millisecond
	handoffStall = 10 * time.Millisecond
)

// writeRetrying writes inputs in one transaction with the places of r,
// retrying until it succeeds or ctx is cancelled; a retry reserves afresh,
// without waiting.
func (f *Fanout) writeRetrying(ctx context.Context, inputs []storage.NotificationInput, r reservation) error {
	for {
		// A write already started finishes even if shutdown begins.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.WriteTimeout)
		created, err := f.createClaiming(wctx, inputs, r)
		cancel()
		if err == nil {
			f.count(ctx, created, len(inputs))
			return nil
		}
		f.writeErrors.Inc()
		f.logger.ErrorContext(ctx, "writing notifications failed; retrying", "events", len(inputs), "err", err)
		if !contain.Sleep(ctx, f.cfg.RetryBackoff) {
			return ctx.Err()
		}
		r = f.reserve(ctx, len(inputs), time.Time{})
	}
}

// createClaiming writes the rows of inputs, with as many webhook deliveries
// claimed as r has places, and hands those over as soon as they are
// committed; it gives back the places it did not use.
func (f *Fanout) createClaiming(ctx context.Context, inputs []storage.NotificationInput, r reservation) (NotificationsCreated, error) {
	claim := Claim{Max: r.places, LeasedUntil: r.until}
	if claim.Max == 0 {
		return f.store.CreateNotificationsClaiming(ctx, inputs, claim)
	}
	claim.Email = f.cfg.Handoff.SendsEmail()
	committed := false
	claim.Committed = func(claimed []storage.Delivery, targets map[string]storage.DeliveryTarget) {
		committed = true
		f.cfg.Handoff.Release(claim.Max - len(claimed))
		if len(claimed) > 0 {
			f.cfg.Handoff.Deliver(claimed, targets)
		}
	}
	created, err := f.store.CreateNotificationsClaiming(ctx, inputs, claim)
	if !committed {
		// Whether a failed commit left rows claimed is unknown: if it did,
		// their leases run out and any retrier's sweep requeues them.
		f.cfg.Handoff.Release(claim.Max)
	}
	return created, err
}

// count adds a written transaction's rows to the metrics.
func (f *Fanout) count(ctx context.Context, created NotificationsCreated, events int) {
	f.notifications.Add(float64(created.Notifications))
	f.inbox.Add(float64(created.InboxMessages))
	f.filtered.Add(float64(created.Filtered))
	for ch, n := range created.Deliveries {
		f.created.WithLabelValues(string(ch)).Add(float64(n))
	}
	for ch, n := range created.Superseded {
		f.deliveries.WithLabelValues(string(ch), "superseded").Add(float64(n))
	}
	storage.QueueAnalyses(f.analyze, created.AnalyzeDue)
	if created.SharedPending {
		select {
		case f.copies <- struct{}{}:
		default: // copyLoop is woken already
		}
	}
	// Last, so that whoever sees the events counted sees what they made.
	f.events.Add(float64(events))
}

// analyzeLoop analyzes the outbox months the writers found due, one at a time,
// until ctx is cancelled.
func (f *Fanout) analyzeLoop(ctx context.Context) {
	storage.AnalyzeMonths(ctx, f.analyze, f.store.AnalyzeOutboxMonth, f.cfg.WriteTimeout, f.logger)
}

// copyLoop writes the members' own copies of shared inbox messages
// InboxCopyDelay after a commit left some, all that are pending then in one
// transaction, until ctx is cancelled; it starts with the copies an earlier
// process may have left (it died between a commit and its copies). A failure
// is logged and tried again after RetryBackoff: the copies wait, and any read
// of a member's inbox writes that member's first.
func (f *Fanout) copyLoop(ctx context.Context) {
	select {
	case f.copies <- struct{}{}:
	default: // a writer's commit woke it already
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.copies:
		}
		for wait := f.cfg.InboxCopyDelay; ; wait = f.cfg.RetryBackoff {
			if !contain.Sleep(ctx, wait) {
				return
			}
			cctx, cancel := context.WithTimeout(ctx, f.cfg.WriteTimeout)
			n, err := f.store.CopySharedInboxMessages(cctx)
			cancel()
			f.copied.Add(float64(n))
			if err == nil || ctx.Err() != nil {
				break
			}
			f.copyErrors.Inc()
			f.logger.ErrorContext(ctx, "copying shared inbox messages to their members failed; retrying", "err", err,
				"in", f.cfg.RetryBackoff)
		}
	}
}
