// Package retrier delivers the outbox: the Fanout turns events from
// lockstream.events into notifications and deliveries in Postgres, and the
// Retrier claims due deliveries, hands each to its channel's sender (webhook,
// email, Swrve push: sensor notifications to clients' devices and the
// standalone pushes of the push API), and records the outcome, retrying with a
// logarithmic back-off (see Backoff) until a delivery is SENT, FAILED, GIVEN_UP
// or SUPERSEDED. Every attempt is logged in Postgres with its outcome, in the
// same statement, and copied to ClickHouse's delivery_attempts in batches.
//
// Any number of retrier processes share one outbox: claims skip rows another
// process holds (FOR UPDATE SKIP LOCKED), and a claim is a lease, so deliveries
// held by a process that died go back to PENDING when it runs out.
package retrier

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/swrve"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/storage"
)

// Store is the outbox (storage.Postgres).
type Store interface {
	ClaimDeliveries(ctx context.Context, now time.Time, limit int, lease time.Duration, channels ...storage.Channel) ([]storage.Delivery, error)
	DeliveryTargets(ctx context.Context, claimed []storage.Delivery) (map[string]storage.DeliveryTarget, error)
	FinishDeliveries(ctx context.Context, finishes []storage.DeliveryFinish) ([]storage.FinishedDelivery, error)
	// AnalyzeOutboxMonth refreshes the planner statistics of a month's outbox
	// partitions, after the outcome write filled them (OutboxGrowth).
	AnalyzeOutboxMonth(ctx context.Context, month string) error
	RequeueExpiredLeases(ctx context.Context, now time.Time) ([]storage.FinishedDelivery, error)
	OutboxStats(ctx context.Context, now time.Time) (storage.OutboxStats, error)
	// PushRequests reads what the standalone pushes among the deliveries ask
	// for, by delivery id.
	PushRequests(ctx context.Context, deliveryIDs []string) (map[string]storage.PushRequest, error)
	// MemberEmails reads what the escalation emails among the deliveries list,
	// by delivery id, with each member's address now.
	MemberEmails(ctx context.Context, deliveryIDs []string) (map[string]storage.MemberEmail, error)
	// ReportEmails reads the weekly reports among the deliveries, by delivery
	// id.
	ReportEmails(ctx context.Context, deliveryIDs []string) (map[string]storage.ReportEmail, error)
	// CopyDeliveryAttempts hands a batch of attempts not copied yet to copy
	// and marks them copied when it succeeds.
	CopyDeliveryAttempts(ctx context.Context, limit int, copy func(context.Context, []storage.DeliveryAttempt) error) (int, error)
}

// AttemptStore is the analysts' copy of the attempt log (storage.ClickHouse).
type AttemptStore interface {
	InsertDeliveryAttempts(ctx context.Context, attempts []storage.DeliveryAttempt) error
}

// WebhookSender makes one webhook attempt (*webhook.Sender).
type WebhookSender interface {
	Send(ctx context.Context, target webhook.Target, n notifier.Notification) notifier.Result
}

// EmailSender makes one email attempt (*email.Sender).
type EmailSender interface {
	Send(ctx context.Context, to string, n notifier.Notification) notifier.Result
}

// UnseenEmailSender mails escalations (*email.Sender): an Email sender that
// is one also sends the escalation emails of members; with one that is not,
// they fail as UNSUPPORTED.
type UnseenEmailSender interface {
	SendUnseen(ctx context.Context, to string, u notifier.Unseen) notifier.Result
}

// ReportEmailSender mails a message rendered by its caller, a text and an
// HTML body, with a Message-ID made of id (*email.Sender): clients' weekly
// reports.
type ReportEmailSender interface {
	SendPrepared(ctx context.Context, to, id, subject, text, html string) notifier.Result
}

// PushSender makes one push attempt about a sensor event to one device of a
// client (the Swrve sender).
type PushSender interface {
	Send(ctx context.Context, target storage.PushTarget, n notifier.Notification) notifier.Result
}

// StandalonePushSender makes one attempt of a standalone push (POST /push,
// POST /v1/pushes) to one device (*swrve.Sender): the message prototype picks
// the Swrve campaign's push key for the platform; a prototype with none is
// Failed with ErrorType MESSAGE_PROTOTYPE_KEY.
type StandalonePushSender interface {
	Send(ctx context.Context, p swrve.Push) notifier.Result
}

// Deps are the Retrier's stores and senders. A nil sender leaves its channel's
// deliveries unclaimed, waiting for a retrier that has one; at least one sender
// is required. Push and StandalonePush share the swrve channel, so they come
// together or not at all (one Swrve sender is usually both). Beware typed nils:
// a nil *webhook.Sender in WebhookSender is not nil.
type Deps struct {
	Store    Store
	Attempts AttemptStore
	Webhook  WebhookSender
	Email    EmailSender
	// Reports mails clients' weekly reports (email deliveries of event type
	// weekly_report); nil: Email, when it is one (*email.Sender is), else
	// they fail as UNSUPPORTED.
	Reports        ReportEmailSender
	Push           PushSender
	StandalonePush StandalonePushSender
	// Endpoints keeps webhook endpoints' health and disables dead ones; nil:
	// no auto-disable.
	Endpoints EndpointStore
	// Limiter paces webhooks per endpoint (rate limits, 429 back-off) across
	// retriers; nil: no rate limits.
	Limiter Limiter
	// Notices mails owners of disabled endpoints; nil: no email.
	Notices NoticeSender
	// Wakeups, when not nil, tells the retrier of new deliveries as they are
	// committed, so it need not poll for them (see OutboxListener).
	Wakeups OutboxListener
}

// The ErrorType values of outcomes the Retrier decides without a channel.
const (
	// ErrorTypeNotOwned: the client was deleted or no longer watches the sensor.
	ErrorTypeNotOwned = "NOT_OWNED"
	// ErrorTypeNoAddress: the client removed the email address or device.
	ErrorTypeNoAddress = "NO_ADDRESS"
	// ErrorTypeStore: the client's current address could not be read; retried.
	ErrorTypeStore = "STORE"
	// ErrorTypeLeaseShort is the error type of an attempt given back unsent
	// because it waited for a sender (the hand-over's backlog) until its
	// lease could not cover an attempt: it is due again at once.
	ErrorTypeLeaseShort = "LEASE_SHORT"
	// ErrorTypeUnsupported: the delivery carries nothing this retrier can send.
	ErrorTypeUnsupported = "UNSUPPORTED"
	// ErrorTypeNoOutcome: the channel returned a result without an outcome; retried.
	ErrorTypeNoOutcome = "NO_OUTCOME"
	// ErrorTypeNothingUnseen: an escalation email or a round's push found
	// nothing left to list (the member saw it all, or lost access, after the
	// round).
	ErrorTypeNothingUnseen = "NOTHING_UNSEEN"
)

// maxErrorLength bounds the error text stored with a delivery and an attempt.
const maxErrorLength = 1024

// Retrier sends due deliveries. Create it with New and start it with Run.
type Retrier struct {
	cfg      Config
	deps     Deps
	channels []storage.Channel
	lanes    []*lane
	m        *retrierMetrics
	logger   *slog.Logger

	workers sync.WaitGroup // attempt goroutines
	// listening says the outbox listener is up: the claim loops then poll only
	// as a fallback.
	listening atomic.Bool
	// notices counts the listener's notices of new deliveries.
	notices atomic.Uint64
	// handoff takes the deliveries a fan-out in this process created claimed.
	handoff handoff
	// growth counts the delivery rows the outcome write made (handed-over
	// webhooks that failed) per month; analyze takes the months due an
	// ANALYZE to analyzeLoop, off the outcome write's path.
	growth  storage.OutboxGrowth
	analyze chan string
}

// lane is a set of channels with its own bound on attempts in flight and its
// own claim loop, so that slow channels (Swrve answers in about a second) and
// fast ones (webhooks, email) neither starve nor hold back each other.
type lane struct {
	name     string
	channels []storage.Channel
	workers  int
	// refill is how many free workers wake the claim loop of a full lane: one
	// claim then fills them together, rather than one claim per freed worker.
	refill int
	busy   atomic.Int64  // attempts in flight or waiting for a sender
	wake   chan struct{} // asks the claim loop to look again at once
	// sending holds a token per attempt being started or sent: at most
	// workers at once. Claims take only free workers, so theirs rarely wait
	// for one; the hand-over may take handoffBacklog times more (Reserve),
	// which wait their turn in memory rather than as PENDING rows that a
	// claim must find, lock and update again.
	sending chan struct{}

	alarmMu sync.Mutex
	// alarms wake the claim loop when deliveries held back come due, by the
	// millisecond they are set for.
	alarms map[int64]*time.Timer
}

func newLane(name string, channels []storage.Channel, workers, batchSize int) *lane {
	return &lane{name: name, channels: channels, workers: workers, sending: make(chan struct{}, workers),
		refill: max(1, min(batchSize, workers/4)), wake: make(chan struct{}, 1), alarms: map[int64]*time.Timer{}}
}

// wakeAfter wakes the claim loop d from now (to the next millisecond, one
// timer per millisecond): a delivery held back for d is claimed again when it
// comes due, not at the next poll, which while the outbox listener is up is a
// second away (FallbackPollInterval).
func (l *lane) wakeAfter(d time.Duration) {
	ms := time.Now().Add(d).UnixMilli() + 1
	l.alarmMu.Lock()
	defer l.alarmMu.Unlock()
	if l.alarms == nil || l.alarms[ms] != nil {
		return
	}
	l.alarms[ms] = time.AfterFunc(time.Until(time.UnixMilli(ms)), func() {
		l.alarmMu.Lock()
		delete(l.alarms, ms)
		l.alarmMu.Unlock()
		l.signalWake()
	})
}

// stopAlarms stops the lane's pending wake-ups for good.
func (l *lane) stopAlarms() {
	l.alarmMu.Lock()
	defer l.alarmMu.Unlock()
	for _, t := range l.alarms {
		t.Stop()
	}
	l.alarms = nil
}

// free reports how many more attempts the lane may start.
func (l *lane) free() int { return l.workers - int(l.busy.Load()) }

// done marks one attempt finished, and wakes the claim loop when the lane was
// full and has refill workers free now.
func (l *lane) done() {
	if l.busy.Add(-1) == int64(l.workers-l.refill) {
		l.signalWake()
	}
}

// release frees n workers reserved for handed-over deliveries that did not
// come, and wakes the claim loop if the lane was too full to claim before.
func (l *lane) release(n int) {
	freeNow := l.workers - int(l.busy.Add(int64(-n)))
	if freeNow >= l.refill && freeNow-n < l.refill {
		l.signalWake()
	}
}

func (l *lane) signalWake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// outcome is one finished attempt on its way to the store.
type outcome struct {
	d     storage.Delivery
	res   notifier.Result
	state storage.DeliveryState // the state the attempt asks for
	next  time.Time             // when a RETRY is due
	at    time.Time             // when the attempt ended
	since time.Time             // what a SENT delivery's latency counts from
	// notSent: no send was made (the store could not say what to send), so the
	// attempt is given back rather than used up.
	notSent bool
	// held: not sent for the endpoint's sake (rate limit, 429, disabled).
	held bool
}

// New returns a Retrier; Run starts it.
func New(cfg Config, deps Deps, reg prometheus.Registerer, logger *slog.Logger) (*Retrier, error) {
	cfg = cfg.WithDefaults()
	var errs []error
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if deps.Store == nil {
		errs = append(errs, errors.New("retrier: Deps.Store is nil"))
	}
	if deps.Attempts == nil {
		errs = append(errs, errors.New("retrier: Deps.Attempts is nil"))
	}
	var channels, pushChannels []storage.Channel
	if deps.Webhook != nil {
		channels = append(channels, storage.ChannelWebhook)
	}
	if deps.Email != nil {
		channels = append(channels, storage.ChannelEmail)
	}
	switch {
	case deps.Push != nil && deps.StandalonePush != nil:
		pushChannels = append(pushChannels, storage.ChannelSwrve)
	case deps.Push != nil:
		errs = append(errs, errors.New("retrier: Deps.Push without Deps.StandalonePush: standalone pushes would be claimed with no sender"))
	case deps.StandalonePush != nil:
		errs = append(errs, errors.New("retrier: Deps.StandalonePush without Deps.Push: sensor pushes would be claimed with no sender"))
	}
	if len(channels)+len(pushChannels) == 0 {
		errs = append(errs, errors.New("retrier: Deps has no sender (Webhook, Email or Push)"))
	}
	if reg == nil {
		errs = append(errs, errors.New("retrier: the Registerer is nil"))
	}
	if logger == nil {
		errs = append(errs, errors.New("retrier: the logger is nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m, err := newRetrierMetrics(reg)
	if err != nil {
		return nil, err
	}
	if deps, err = guardSenders(deps, reg, logger); err != nil {
		return nil, err
	}
	var lanes []*lane
	if len(channels) > 0 {
		lanes = append(lanes, newLane("deliveries", channels, cfg.Workers, cfg.BatchSize))
	}
	if len(pushChannels) > 0 {
		lanes = append(lanes, newLane("pushes", pushChannels, cfg.PushWorkers, cfg.BatchSize))
	}
	return &Retrier{
		cfg:      cfg,
		deps:     deps,
		channels: append(channels, pushChannels...),
		lanes:    lanes,
		m:        m,
		logger:   logger,
		analyze:  make(chan string, 16),
	}, nil
}

// Run delivers until ctx is cancelled, then stops claiming, lets the attempts
// in flight finish (for up to DrainTimeout), records their outcomes and
// attempts on a context that is not cancelled, and returns nil. It returns an
// error only if it cannot start. Run must not be called twice at once.
func (r *Retrier) Run(ctx context.Context) error {
	workers := 0
	for _, l := range r.lanes {
		workers += l.workers
		r.logger.InfoContext(ctx, "retrier lane", "lane", l.name, "channels", l.channels, "workers", l.workers)
	}
	r.logger.InfoContext(ctx, "retrier started", "channels", r.channels, "workers", workers,
		"max_attempts", r.cfg.MaxAttempts, "backoff_base", r.cfg.BackoffBase)

	// Attempts run on work, which shutdown does not cancel: they are claimed
	// already, and an attempt cut short is an attempt wasted.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()

	outcomes := make(chan outcome, workers)
	r.openHandoff(work, outcomes)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		r.finishLoop(ctx, outcomes)
	}()
	var background sync.WaitGroup
	background.Go(func() { r.every(ctx, r.cfg.LeaseSweepInterval, r.requeueExpired) })
	background.Go(func() { r.analyzeLoop(ctx) })
	background.Go(func() { r.every(ctx, r.cfg.AttemptFlushInterval, r.copyAttempts) })
	background.Go(func() { r.every(ctx, r.cfg.StatsInterval, r.refreshStats) })
	if r.deps.Endpoints != nil {
		background.Go(func() { r.every(ctx, r.cfg.EndpointSweepInterval, r.sweepEndpoints) })
	}
	if r.deps.Wakeups != nil {
		background.Go(func() { r.listen(ctx) })
	}

	var claimers sync.WaitGroup
	for _, l := range r.lanes {
		claimers.Go(func() { r.claimLoop(ctx, work, l, outcomes) })
	}
	claimers.Wait()
	r.closeHandoff()
	for _, l := range r.lanes {
		l.stopAlarms()
	}

	stopCtx := context.WithoutCancel(ctx)
	inFlight := 0
	for _, l := range r.lanes {
		inFlight += int(l.busy.Load())
	}
	r.logger.InfoContext(stopCtx, "retrier stopping: draining attempts in flight", "in_flight", inFlight)
	drainDeadline := time.AfterFunc(r.cfg.DrainTimeout, cancelWork)
	r.workers.Wait()
	drainDeadline.Stop()
	close(outcomes)
	<-finished
	background.Wait()
	// The last outcomes' attempts, on a context that is not cancelled.
	r.copyAttempts(stopCtx)
	r.logger.InfoContext(stopCtx, "retrier stopped")
	return nil
}

// claimLoop claims the lane's due deliveries as its workers free up, until
// ctx is cancelled.
func (r *Retrier) claimLoop(ctx, work context.Context, l *lane, outcomes chan<- outcome) {
	poll := time.NewTicker(r.cfg.PollInterval)
	defer poll.Stop()
	// full says the last claim took all it asked for, so more is due. The lane
	// then claims again when refill workers are free or at the next poll, not
	// as each worker frees, which would cost three queries a delivery.
	full, polled := false, true
	lastPoll := time.Now()
	for ctx.Err() == nil {
		if free := l.free(); free > 0 && (polled || !full || free >= l.refill) {
			limit := min(free, r.cfg.BatchSize)
			n, err := r.claim(ctx, work, l, limit, outcomes)
			if err != nil && ctx.Err() == nil {
				r.m.errors.WithLabelValues("claim").Inc()
				r.logger.ErrorContext(ctx, "claiming deliveries failed", "lane", l.name, "err", err)
			}
			full, polled = err == nil && n == limit, false
			if full {
				continue // more is probably due: look again at once, if workers are free
			}
		}
		polled = r.waitForWork(ctx, l, poll, &lastPoll)
	}
}

// claim claims up to limit of the lane's deliveries, reads their targets and
// starts an attempt for each. It returns how many it claimed.
func (r *Retrier) claim(ctx, work context.Context, l *lane, limit int, outcomes chan<- outcome) (int, error) {
	claimed, err := r.deps.Store.ClaimDeliveries(ctx, r.cfg.Now(), limit, r.cfg.Lease, l.channels...)
	if err != nil {
		return 0, err
	}
	if len(claimed) == 0 {
		return 0, nil
	}
	r.start(ctx, work, l, claimed, outcomes, false, nil)
	return len(claimed), nil
}

// start reads the claimed deliveries' targets, unless known (the targets of
// webhooks the fan-out handed over, read in its transaction), and starts an
// attempt for each one not held back. reserved says each delivery has its
// worker counted in l.busy already (handed over, see Reserve); else each
// attempt started takes one.
func (r *Retrier) start(ctx, work context.Context, l *lane, claimed []storage.Delivery, outcomes chan<- outcome,
	reserved bool, known map[string]storage.DeliveryTarget) {
	targets := known
	var (
		pushes             map[string]storage.PushRequest
		emails             map[string]storage.MemberEmail
		reports            map[string]storage.ReportEmail
		targetErr, pushErr error
	)
	if known == nil {
		// The deliveries are ours now: read their targets even if shutdown begins.
		targets, pushes, emails, reports, targetErr, pushErr = r.readClaimed(ctx, work, claimed)
	}
	var held map[string]time.Duration
	var quiet map[string]time.Duration
	if targetErr == nil {
		held = r.admitWebhooks(ctx, claimed, targets)
		quiet = r.quietHolds(claimed, targets)
	}
	for _, d := range claimed {
		wait, isHeld := held[d.ID]
		quietWait, isQuiet := quiet[d.ID]
		switch {
		case isHeld:
			outcomes <- r.heldBack(d, wait)
		case isQuiet:
			outcomes <- r.quietBack(d, quietWait)
		}
		if isHeld || isQuiet {
			if reserved {
				l.done()
			}
			continue
		}
		target, found := targets[d.ID]
		push, isPush := pushes[d.ID]
		if !reserved {
			l.busy.Add(1)
		}
		// A sender's token, taken here so that attempts waiting for one (the
		// hand-over's backlog) wait in order, without a goroutine each.
		l.sending <- struct{}{}
		release := sync.OnceFunc(func() { <-l.sending })
		r.workers.Go(func() {
			defer release()
			var res notifier.Result
			notSent := false
			start := time.Now()
			late := r.tooLateToSend(d)
			switch {
			case late:
				res = notifier.Result{Outcome: notifier.Retry, ErrorType: ErrorTypeLeaseShort,
					Err: errors.New("waited for a sender until too little of its lease was left for an attempt")}
				notSent = true
			case targetErr != nil:
				res = notifier.Result{Outcome: notifier.Retry, ErrorType: ErrorTypeStore,
					Err: fmt.Errorf("reading the client's current address: %w", targetErr)}
				notSent = true
			case pushErr != nil && (isStandalonePush(d) || isMemberEmail(d) || isReportEmail(d)):
				res = notifier.Result{Outcome: notifier.Retry, ErrorType: ErrorTypeStore,
					Err: fmt.Errorf("reading the push or email: %w", pushErr)}
				notSent = true
			case isPush && d.SensorID != "" && found && !target.Owned:
				// An escalation push: access is checked when sending.
				res = failed(ErrorTypeNotOwned, fmt.Errorf("client %s no longer owns sensor %s", d.ClientID, d.SensorID))
			case isPush && d.NotificationID == "" && push.Message == "":
				// A round's push whose episodes were all seen, or lost their
				// access, or whose member was deleted, since the round.
				res = failed(ErrorTypeNothingUnseen, errors.New("nothing left unseen to push about"))
			default:
				actx, cancel := context.WithTimeout(work, r.cfg.AttemptTimeout)
				switch me, isEmail := emails[d.ID]; {
				case isMemberEmail(d):
					res = r.sendMemberEmail(actx, d, me, isEmail)
				case isReportEmail(d):
					report, isReport := reports[d.ID]
					res = r.sendReport(actx, target, found, report, isReport)
				case isPush:
					res = r.sendPush(actx, push)
				default:
					res = r.send(actx, d, target, found)
				}
				cancel()
				release()
				r.webhookAnswered(work, d, res)
			}
			if res.Duration == 0 {
				res.Duration = time.Since(start)
			}
			o := r.settle(d, res, notSent)
			if late {
				o.next = o.at // nothing is wrong with the receiver: due at once
			}
			if isPush {
				// A scheduled push waited for its window on purpose.
				o.since = push.WindowAt
			}
			outcomes <- o
			l.done()
		})
	}
}

// readClaimed reads, in a query each, the current targets of the claimed
// deliveries, the standalone pushes among them, the escalation emails and
// the weekly reports among them. targetErr fails every delivery's attempt;
// pushErr those of the pushes, emails and reports (each is logged and
// counted here).
func (r *Retrier) readClaimed(ctx, work context.Context, claimed []storage.Delivery) (
	targets map[string]storage.DeliveryTarget, pushes map[string]storage.PushRequest,
	emails map[string]storage.MemberEmail, reports map[string]storage.ReportEmail, targetErr, pushErr error,
) {
	var pushIDs, emailIDs, reportIDs []string
	for _, d := range claimed {
		if isReportEmail(d) {
			reportIDs = append(reportIDs, d.ID)
		}
		if isStandalonePush(d) {
			pushIDs = append(pushIDs, d.ID)
		}
		if isMemberEmail(d) {
			emailIDs = append(emailIDs, d.ID)
		}
	}
	tctx, cancel := context.WithTimeout(work, r.cfg.WriteTimeout)
	defer cancel()
	targets, targetErr = r.deps.Store.DeliveryTargets(tctx, claimed)
	if targetErr == nil && len(pushIDs) > 0 {
		pushes, pushErr = r.deps.Store.PushRequests(tctx, pushIDs)
	}
	if targetErr == nil && pushErr == nil && len(emailIDs) > 0 {
		emails, pushErr = r.deps.Store.MemberEmails(tctx, emailIDs)
	}
	if targetErr == nil && pushErr == nil && len(reportIDs) > 0 {
		reports, pushErr = r.deps.Store.ReportEmails(tctx, reportIDs)
	}
	if targetErr != nil {
		r.m.errors.WithLabelValues("target").Inc()
		r.logger.ErrorContext(ctx, "reading delivery targets failed; the claimed deliveries are retried",
			"deliveries", len(claimed), "err", targetErr)
	}
	if pushErr != nil {
		r.m.errors.WithLabelValues("target").Inc()
		r.logger.ErrorContext(ctx, "reading standalone pushes or member emails failed; they are retried",
			"pushes", len(pushIDs), "emails", len(emailIDs), "reports", len(reportIDs), "err", pushErr)
	}
	return targets, pushes, emails, reports, targetErr, pushErr
}

// signalWake wakes the claim loop of every lane.
func (r *Retrier) signalWake() {
	for _, l := range r.lanes {
		l.signalWake()
	}
}

// send makes the attempt on the delivery's channel, after checking that the
// client still owns the sensor and still has the address.
func (r *Retrier) send(ctx context.Context, d storage.Delivery, t storage.DeliveryTarget, found bool) notifier.Result {
	switch {
	case !found:
		return failed(ErrorTypeUnsupported, errors.New("the delivery no longer exists"))
	case d.NotificationID == "":
		return failed(ErrorTypeUnsupported, fmt.Errorf("%s delivery without a notification: nothing to send", d.Channel))
	case !t.ClientExists:
		return failed(ErrorTypeNotOwned, fmt.Errorf("client %s was deleted", d.ClientID))
	case !t.Owned:
		return failed(ErrorTypeNotOwned, fmt.Errorf("client %s no longer owns sensor %s", d.ClientID, d.SensorID))
	}
	n := notifier.Notification{
		ID:            d.NotificationID,
		EventID:       d.EventID,
		Type:          event.Type(d.EventType),
		SensorID:      d.SensorID,
		SensorAddress: t.SensorAddress,
		Data:          d.Data,
		Previous:      d.Previous,
		At:            d.EventAt,
		Attempt:       d.Attempts,
		Severity:      event.SeverityOf(event.Type(d.EventType), d.Data),
		Seq:           d.Seq,
		Site:          d.Site,
		Sensors:       d.Sensors,
		LostSince:     d.LostSince,
	}
	switch d.Channel {
	case storage.ChannelWebhook:
		if r.deps.Webhook != nil {
			return r.deps.Webhook.Send(ctx, webhook.Target{URL: t.WebhookURL, Secret: t.Secret,
				PreviousSecret: t.PreviousSecret, PreviousSecretUntil: t.PreviousSecretUntil}, n)
		}
	case storage.ChannelEmail:
		if t.Email == "" {
			return failed(ErrorTypeNoAddress, fmt.Errorf("client %s has no email address any more", d.ClientID))
		}
		if r.deps.Email != nil {
			return r.deps.Email.Send(ctx, t.Email, n)
		}
	case storage.ChannelSwrve:
		platform, key, ok := strings.Cut(d.Target, ":")
		if !ok {
			return failed(ErrorTypeUnsupported, fmt.Errorf("malformed push target %q", d.Target))
		}
		if !t.PushTargetExists {
			return failed(ErrorTypeNoAddress, fmt.Errorf("client %s no longer has push target %s", d.ClientID, d.Target))
		}
		if r.deps.Push != nil {
			return r.deps.Push.Send(ctx, storage.PushTarget{Platform: storage.Platform(platform), PushKey: key}, n)
		}
	}
	// Unreachable while claims are limited to channels with a sender.
	return failed(ErrorTypeUnsupported, fmt.Errorf("no sender for channel %q", d.Channel))
}

// isStandalonePush reports whether d may be a standalone push: a swrve delivery
// of no sensor event.
func isStandalonePush(d storage.Delivery) bool {
	return d.Channel == storage.ChannelSwrve && d.NotificationID == ""
}

// isMemberEmail reports whether d is an escalation email to a member: an
// email delivery of no sensor event that is not a weekly report.
func isMemberEmail(d storage.Delivery) bool {
	return d.Channel == storage.ChannelEmail && d.NotificationID == "" && !isReportEmail(d)
}

// isReportEmail reports whether d is a client's weekly report: an email
// delivery of no sensor event whose target is "report:<week>".
func isReportEmail(d storage.Delivery) bool {
	return d.Channel == storage.ChannelEmail && d.NotificationID == "" && strings.HasPrefix(d.Target, "report:")
}

// sendReport makes one attempt of a client's weekly report, rendered when its
// week closed, to the client's address now.
func (r *Retrier) sendReport(ctx context.Context, t storage.DeliveryTarget, targetFound bool, e storage.ReportEmail, found bool) notifier.Result {
	switch {
	case r.deps.Reports == nil:
		return failed(ErrorTypeUnsupported, errors.New("the email sender cannot send reports"))
	case !targetFound || !t.ClientExists:
		return failed(ErrorTypeNotOwned, errors.New("the client was deleted"))
	case !found:
		return failed(ErrorTypeUnsupported, errors.New("the report of the delivery is gone"))
	case t.Email == "":
		return failed(ErrorTypeNoAddress, errors.New("the client has no email address any more"))
	}
	return r.deps.Reports.SendPrepared(ctx, t.Email, e.DeliveryID, e.Subject, e.Text, e.HTML)
}

// sendMemberEmail makes one attempt of a member's email: an escalation,
// listing what the member has still not seen of sensors its client still
// watches, or one free-form notification.
func (r *Retrier) sendMemberEmail(ctx context.Context, d storage.Delivery, me storage.MemberEmail, found bool) notifier.Result {
	u, ok := r.deps.Email.(UnseenEmailSender)
	switch {
	case !ok:
		return failed(ErrorTypeUnsupported, errors.New("the email sender cannot send escalations"))
	case !found:
		return failed(ErrorTypeUnsupported, fmt.Errorf("email delivery %s has neither a notification nor an escalation", d.ID))
	case !me.MemberExists:
		return failed(ErrorTypeNotOwned, errors.New("the member was deleted"))
	case me.Email == "":
		return failed(ErrorTypeNoAddress, errors.New("the member has no email address any more"))
	case len(me.Messages) == 0:
		return failed(ErrorTypeNothingUnseen, errors.New("nothing left unseen to list (seen meanwhile, or access lost)"))
	}
	e := notifier.Unseen{ID: d.ID, Digest: me.Kind == storage.MemberEmailDigest,
		Notification: me.Kind == storage.MemberEmailMessage, MemberName: me.MemberName, Timezone: me.Timezone}
	for _, m := range me.Messages {
		e.Messages = append(e.Messages, notifier.UnseenMessage{Type: m.Type, SensorID: m.SensorID,
			SensorAddress: m.SensorAddress, SensorSite: m.SensorSite, Subject: m.Subject, Severity: m.Severity, Data: m.Data,
			Previous: m.Previous, At: m.At, AckURL: ackURL(m)})
	}
	return u.SendUnseen(ctx, me.Email, e)
}

// sendPush makes one attempt of a standalone push.
func (r *Retrier) sendPush(ctx context.Context, p storage.PushRequest) notifier.Result {
	if r.deps.StandalonePush == nil {
		// Unreachable while the swrve channel is claimed only with both senders.
		return failed(ErrorTypeUnsupported, errors.New("no sender for standalone pushes"))
	}
	return r.deps.StandalonePush.Send(ctx, swrve.Push{Platform: p.Platform, MessagePrototypeKey: p.MessagePrototypeKey,
		PushKey: p.PushKey, Message: p.Message})
}

func failed(errorType string, err error) notifier.Result {
	return notifier.Result{Outcome: notifier.Failed, ErrorType: errorType, Err: err}
}

// settle turns an attempt's result into the state it asks for. An attempt not
// sent is retried after the base back-off whatever the attempts so far: it
// used none up.
// tooLateToSend reports whether a delivery's lease ends before an attempt
// started now could time out: sending it could outlive the lease, and the
// lease sweep would give it to another retrier while it is being sent.
func (r *Retrier) tooLateToSend(d storage.Delivery) bool {
	return !d.LeasedUntil.IsZero() && r.cfg.Now().After(d.LeasedUntil.Add(-r.cfg.AttemptTimeout))
}

func (r *Retrier) settle(d storage.Delivery, res notifier.Result, notSent bool) outcome {
	o := outcome{d: d, res: res, at: r.cfg.Now(), since: d.EventAt, notSent: notSent}
	if notSent {
		o.state, o.next = storage.DeliveryRetry, o.at.Add(r.cfg.BackoffBase)
		return o
	}
	switch res.Outcome {
	case notifier.Sent:
		o.state = storage.DeliverySent
		return o
	case notifier.Failed:
		o.state = storage.DeliveryFailed
		return o
	case notifier.Retry:
	default:
		o.res.ErrorType = ErrorTypeNoOutcome
		o.res.Err = fmt.Errorf("the %s channel returned no outcome (error: %v)", d.Channel, res.Err)
	}
	if d.Attempts >= r.cfg.MaxAttempts {
		o.state = storage.DeliveryGivenUp
		return o
	}
	o.state = storage.DeliveryRetry
	o.next = o.at.Add(RetryDelay(d.Attempts, res.RetryAfter, r.cfg.BackoffBase, r.cfg.BackoffMax, r.cfg.Rand))
	return o
}

// finishLoop records outcomes in batches as they arrive, until outcomes is
// closed. Writes run on ctx without its cancellation: the attempts happened.
func (r *Retrier) finishLoop(ctx context.Context, outcomes <-chan outcome) {
	ctx = context.WithoutCancel(ctx)
	for first := range outcomes {
		batch := []outcome{first}
	collect:
		for len(batch) < r.cfg.FinishBatchSize {
			select {
			case o, ok := <-outcomes:
				if !ok {
					break collect
				}
				batch = append(batch, o)
			default:
				break collect
			}
		}
		notices := r.notices.Load()
		frees := r.record(ctx, batch)
		// A finished delivery may free the next one of its key: claim it now.
		// Otherwise no claim is due, unless a notice of new deliveries came
		// while the outcomes were written: its claim may have run before they
		// committed, and found a new delivery still held back by one of them.
		// Without a listener the claim loop polls; wake it as before.
		if frees || r.notices.Load() != notices || !r.listening.Load() {
			r.signalWake()
		}
	}
}

// record writes a batch of outcomes and their attempts to the outbox in one
// statement, then to the metrics. It reports whether a recorded delivery held
// back another that may be claimed now (storage.FinishedDelivery.Frees).
func (r *Retrier) record(ctx context.Context, batch []outcome) (frees bool) {
	finishes := make([]storage.DeliveryFinish, len(batch))
	for i, o := range batch {
		finishes[i] = storage.DeliveryFinish{
			ID:            o.d.ID,
			Attempt:       o.d.Attempts,
			State:         o.state,
			NextAttemptAt: o.next,
			Error:         errorText(o.res.Err),
			HTTPStatus:    o.res.HTTPStatus,
			ErrorType:     o.res.ErrorType,
			AnswerCode:    o.res.AnswerCode,
			AnswerMessage: o.res.AnswerMessage,
			Duration:      o.res.Duration,
			At:            o.at,
			NotSent:       o.notSent,
		}
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	done, err := r.deps.Store.FinishDeliveries(wctx, finishes)
	cancel()
	if err != nil {
		r.m.errors.WithLabelValues("finish").Inc()
		r.logger.ErrorContext(ctx, "recording delivery outcomes failed; the deliveries are retried when their lease runs out",
			"deliveries", len(batch), "err", err)
	}
	states := make(map[string]storage.DeliveryState, len(done))
	for _, f := range done {
		states[f.ID] = f.State
		frees = frees || f.Frees
	}
	r.recordHealth(ctx, batch, states)
	r.wakeWhenDue(batch, states)
	r.noteGrowth(batch, states)
	for _, o := range batch {
		status, recorded := states[o.d.ID]
		switch {
		case recorded:
			r.m.deliveries.WithLabelValues(string(o.d.Channel), strings.ToLower(string(status))).Inc()
			if status == storage.DeliverySent {
				r.m.latency.WithLabelValues(string(o.d.Channel)).Observe(max(o.at.Sub(o.since), 0).Seconds())
			}
		case err == nil:
			r.m.fenced.Inc()
			r.logger.WarnContext(ctx, "delivery outcome not recorded: its lease ran out and it moved on",
				"delivery_id", o.d.ID, "attempt", o.d.Attempts, "outcome", o.state)
			status = o.state
		default:
			status = o.state
		}
		switch {
		case o.held: // counted as rate-limited when held back
		case o.notSent:
			r.m.notSent.Inc()
		default:
			r.m.attempts.WithLabelValues(string(o.d.Channel), cmp.Or(o.res.ErrorType, "none")).Inc()
		}
		r.logger.DebugContext(ctx, "delivery attempt", "delivery_id", o.d.ID, "channel", o.d.Channel,
			"attempt", o.d.Attempts, "status", status, "http_status", o.res.HTTPStatus, "err", o.res.Err)
	}
	return frees
}

// wakeWhenDue sets the claim loop of their lane to look again when the
// recorded deliveries held back for their endpoint's or member's sake come
// due: the limiter's wait is the whole of their delay. Set once they are
// recorded, so the claim finds them RETRY, not still IN_FLIGHT.
func (r *Retrier) wakeWhenDue(batch []outcome, states map[string]storage.DeliveryState) {
	now := r.cfg.Now()
	for _, o := range batch {
		if !o.held || states[o.d.ID] != storage.DeliveryRetry {
			continue
		}
		for _, l := range r.lanes {
			if slices.Contains(l.channels, o.d.Channel) {
				l.wakeAfter(o.next.Sub(now))
			}
		}
	}
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	s := strings.ToValidUTF8(err.Error(), "?")
	if len(s) > maxErrorLength {
		s = strings.ToValidUTF8(s[:maxErrorLength], "") + "…"
	}
	return s
}

// every calls fn at once and then every interval until ctx is cancelled.
func (r *Retrier) every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// requeueExpired puts deliveries whose retrier died back to PENDING.
func (r *Retrier) requeueExpired(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	requeued, err := r.deps.Store.RequeueExpiredLeases(ctx, r.cfg.Now())
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			r.m.errors.WithLabelValues("requeue").Inc()
			r.logger.ErrorContext(ctx, "requeueing expired leases failed", "err", err)
		}
		return
	}
	for _, d := range requeued {
		if d.State == storage.DeliverySuperseded {
			r.m.deliveries.WithLabelValues(string(d.Channel), "superseded").Inc()
		} else {
			r.m.requeued.Inc()
		}
	}
	if len(requeued) > 0 {
		r.logger.WarnContext(ctx, "deliveries whose lease ran out were requeued", "deliveries", len(requeued))
		r.signalWake()
	}
}

// copyAttempts copies the attempt log to ClickHouse in batches until it has
// caught up or a copy fails (retried at the next tick; the rows wait in
// Postgres, so a slow or absent ClickHouse costs delay, never rows).
func (r *Retrier) copyAttempts(ctx context.Context) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
		n, err := r.deps.Store.CopyDeliveryAttempts(cctx, r.cfg.AttemptBatchSize, r.deps.Attempts.InsertDeliveryAttempts)
		cancel()
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				r.m.errors.WithLabelValues("attempts").Inc()
				r.logger.ErrorContext(ctx, "copying delivery attempts to ClickHouse failed", "err", err)
			}
			return
		}
		r.m.attemptsCopied.Add(float64(n))
		if n < r.cfg.AttemptBatchSize {
			return
		}
	}
}

// refreshStats updates the outbox gauges.
func (r *Retrier) refreshStats(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	now := r.cfg.Now()
	stats, err := r.deps.Store.OutboxStats(ctx, now)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			r.m.errors.WithLabelValues("stats").Inc()
			r.logger.ErrorContext(ctx, "reading outbox stats failed", "err", err)
		}
		return
	}
	for state, n := range stats.Depth {
		r.m.depth.WithLabelValues(string(state)).Set(float64(n))
	}
	oldest := 0.0
	if !stats.OldestDue.IsZero() {
		oldest = max(now.Sub(stats.OldestDue).Seconds(), 0)
	}
	r.m.oldestDue.Set(oldest)
}

// ackURL is an incident reminder's one-click ack link (its message's
// ack_url), or "" for another message.
func ackURL(m inbox.Message) string {
	if m.Type != incidentReminderType || len(m.Message) == 0 {
		return ""
	}
	var body struct {
		AckURL string `json:"ack_url"`
	}
	if json.Unmarshal(m.Message, &body) != nil {
		return ""
	}
	return body.AckURL
}

// incidentReminderType is the inbox message type of an incident reminder.
const incidentReminderType = domain.IncidentReminder

// noteGrowth counts the delivery rows the recorded outcomes may have made —
// a webhook handed over with no row gets one when its attempt did not
// succeed — and queues the months that grew enough for an ANALYZE: with a
// burst handed over whole, the fan-out's own count sees few delivery rows,
// and an endpoint that starts failing fills the partitions after the
// fan-out's last ANALYZE of them, while the cached plans still probe them as
// empty (by sequential scan, once per outcome).
func (r *Retrier) noteGrowth(batch []outcome, states map[string]storage.DeliveryState) {
	var months map[string]int
	for _, o := range batch {
		if st, ok := states[o.d.ID]; ok && st != storage.DeliverySent && o.d.Channel == storage.ChannelWebhook {
			if months == nil {
				months = map[string]int{}
			}
			months[o.d.EventAt.UTC().Format("200601")]++
		}
	}
	storage.QueueAnalyses(r.analyze, r.growth.Note(months))
}

// analyzeLoop analyzes the months noteGrowth found due, one at a time, until
// ctx is cancelled.
func (r *Retrier) analyzeLoop(ctx context.Context) {
	storage.AnalyzeMonths(ctx, r.analyze, r.deps.Store.AnalyzeOutboxMonth, r.cfg.WriteTimeout, r.logger)
}
