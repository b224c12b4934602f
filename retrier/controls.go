package retrier

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/storage"
)

// Delivery controls (docs/DESIGN.md "Delivery controls"): per-endpoint rate
// limits and 429 back-off shared through Redis, the health of webhook
// endpoints, their auto-disable, and the owner's email about it.

// EndpointStore keeps the health of webhook endpoints and disables dead ones
// (storage.Postgres).
type EndpointStore interface {
	RecordWebhookHealth(ctx context.Context, outcomes []storage.WebhookOutcome, failingAfter int) (int, error)
	DisableFailingEndpoints(ctx context.Context, now time.Time, failingFor time.Duration, minFailures int) (storage.EndpointSweep, error)
	PublishEndpointNotices(ctx context.Context, limit int) (int, error)
	MailEndpointNotices(ctx context.Context, limit int, send func(context.Context, storage.EndpointNotice) storage.NoticeResult) (int, error)
}

// Limiter paces webhook starts per endpoint across every retrier process
// (storage.Redis).
type Limiter interface {
	AdmitWebhooks(ctx context.Context, reqs []storage.WebhookAdmission, window time.Duration) ([]time.Duration, error)
	BlockWebhooks(ctx context.Context, clientID string, d time.Duration) error
}

// NoticeSender mails a plain-text notice to a client's owner (*email.Sender).
type NoticeSender interface {
	SendText(ctx context.Context, to, subject, text string) notifier.Result
}

// ErrorTypeRateLimited is the last_error class of a delivery held back by its
// endpoint's rate limit, a 429's Retry-After or the endpoint being disabled: no
// attempt was made or used up.
const ErrorTypeRateLimited = "RATE_LIMITED"

// noticeBatch is the most endpoint notices one sweep mails.
const noticeBatch = 20

// admitWebhooks decides which of the claimed webhook deliveries may be sent
// now: the others are returned with how long to hold them back (their attempt
// is given back). One Redis call per claim. When Redis cannot be reached the
// deliveries are sent: a limit is not worth stopping delivery for, and the
// error is logged and counted.
func (r *Retrier) admitWebhooks(ctx context.Context, claimed []storage.Delivery, targets map[string]storage.DeliveryTarget) map[string]time.Duration {
	held := map[string]time.Duration{}
	var (
		reqs []storage.WebhookAdmission
		ids  []string
	)
	for _, d := range claimed {
		t, ok := targets[d.ID]
		if d.Channel != storage.ChannelWebhook || !ok || !t.ClientExists {
			continue
		}
		if t.EndpointDisabled {
			// Disabled since the claim's read: the sweep makes it PAUSED.
			held[d.ID] = r.cfg.EndpointSweepInterval
			continue
		}
		if r.deps.Limiter != nil {
			reqs = append(reqs, storage.WebhookAdmission{ClientID: d.ClientID, Rate: t.RateLimit})
			ids = append(ids, d.ID)
		}
	}
	if len(reqs) > 0 {
		actx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
		waits, err := r.deps.Limiter.AdmitWebhooks(actx, reqs, r.cfg.RateLimitWindow)
		cancel()
		if err != nil {
			r.m.errors.WithLabelValues("ratelimit").Inc()
			r.logger.ErrorContext(ctx, "asking Redis for webhook rate limits failed; sending without them",
				"deliveries", len(reqs), "err", err)
		}
		for i, w := range waits {
			if w > 0 {
				held[ids[i]] = w
			}
		}
	}
	return held
}

// heldBack is the outcome of a delivery not sent for its endpoint's sake: due
// again after wait, its attempt given back, its last error kept.
func (r *Retrier) heldBack(d storage.Delivery, wait time.Duration) outcome {
	r.m.rateLimited.Inc()
	at := r.cfg.Now()
	return outcome{d: d, state: storage.DeliveryRetry, next: at.Add(wait), at: at, since: d.EventAt, notSent: true,
		held: true, res: notifier.Result{Outcome: notifier.Retry, ErrorType: ErrorTypeRateLimited,
			HTTPStatus: d.LastHTTPStatus, Err: keptError(d.LastError)}}
}

// keptError carries a delivery's last error over a hold-back unchanged.
func keptError(s string) error {
	if s == "" {
		return nil
	}
	return errors.New(s)
}

// webhookAnswered slows the whole endpoint down when it answered 429 with
// Retry-After: every retrier holds its deliveries back that long.
func (r *Retrier) webhookAnswered(ctx context.Context, d storage.Delivery, res notifier.Result) {
	if r.deps.Limiter == nil || d.Channel != storage.ChannelWebhook ||
		res.HTTPStatus != http.StatusTooManyRequests || res.RetryAfter <= 0 {
		return
	}
	wait := min(res.RetryAfter, r.cfg.BackoffMax)
	bctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	if err := r.deps.Limiter.BlockWebhooks(bctx, d.ClientID, wait); err != nil {
		r.m.errors.WithLabelValues("ratelimit").Inc()
		r.logger.ErrorContext(ctx, "holding back an endpoint that answered 429 failed", "client_id", d.ClientID, "err", err)
		return
	}
	r.m.endpointBlocks.Inc()
}

// ownErrorType reports whether an outcome of that type was decided without
// reaching the endpoint: it says nothing of its health.
func ownErrorType(t string) bool {
	switch t {
	case ErrorTypeNotOwned, ErrorTypeNoAddress, ErrorTypeStore, ErrorTypeUnsupported, ErrorTypeNoOutcome, ErrorTypeRateLimited,
		ErrorTypeQuietHours:
		return true
	}
	return false
}

// recordHealth folds the recorded webhook attempts of a batch into their
// endpoints' health (one statement, which also records the operational
// notices the batch calls for); only when it recorded some, it publishes them
// at once (one transaction more).
func (r *Retrier) recordHealth(ctx context.Context, batch []outcome, states map[string]storage.DeliveryState) {
	if r.deps.Endpoints == nil {
		return
	}
	var health []storage.WebhookOutcome
	for _, o := range batch {
		if _, recorded := states[o.d.ID]; !recorded || o.notSent || o.d.Channel != storage.ChannelWebhook ||
			ownErrorType(o.res.ErrorType) {
			continue
		}
		health = append(health, storage.WebhookOutcome{ClientID: o.d.ClientID, OK: o.state == storage.DeliverySent, At: o.at})
	}
	if len(health) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	notices, err := r.deps.Endpoints.RecordWebhookHealth(wctx, health, r.cfg.FailingAfter)
	if err != nil {
		r.m.errors.WithLabelValues("health").Inc()
		r.logger.ErrorContext(ctx, "recording webhook endpoint health failed", "attempts", len(health), "err", err)
		return
	}
	if notices > 0 {
		r.publishNotices(wctx)
	}
}

// publishNotices puts the operational notices not published yet on their
// clients' feeds and into their members' inboxes. The sweep calls it too,
// so a notice whose publishing failed here goes out at the next sweep.
func (r *Retrier) publishNotices(ctx context.Context) {
	for {
		n, err := r.deps.Endpoints.PublishEndpointNotices(ctx, noticeBatch)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				r.m.errors.WithLabelValues("notice").Inc()
				r.logger.ErrorContext(ctx, "publishing endpoint notices failed", "err", err)
			}
			return
		}
		r.m.endpointNoticesPublished.Add(float64(n))
		if n < noticeBatch {
			return
		}
	}
}

// sweepEndpoints disables the endpoints that failed for DisableAfter, then
// publishes and mails the operational notices.
func (r *Retrier) sweepEndpoints(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	sweep, err := r.deps.Endpoints.DisableFailingEndpoints(sctx, r.cfg.Now(), r.cfg.DisableAfter, r.cfg.DisableMinFailures)
	cancel()
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			r.m.errors.WithLabelValues("disable").Inc()
			r.logger.ErrorContext(ctx, "disabling failing endpoints failed", "err", err)
		}
		return
	}
	for _, d := range sweep.Disabled {
		r.m.endpointsDisabled.Inc()
		r.logger.WarnContext(ctx, "webhook endpoint disabled: every attempt failed", "client_id", d.ClientID,
			"failing_since", d.FailingSince, "failures", d.Failures)
	}
	if sweep.Resumed > 0 {
		r.signalWake()
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	r.publishNotices(pctx)
	cancel()
	if r.deps.Notices == nil {
		return
	}
	mctx, cancel := context.WithTimeout(ctx, r.cfg.AttemptTimeout)
	defer cancel()
	if _, err := r.deps.Endpoints.MailEndpointNotices(mctx, noticeBatch, r.mailNotice); err != nil && !errors.Is(err, context.Canceled) {
		r.m.errors.WithLabelValues("notice").Inc()
		r.logger.ErrorContext(ctx, "mailing endpoint notices failed", "err", err)
	}
}

// mailNotice sends one operational notice's email to the client's address.
func (r *Retrier) mailNotice(ctx context.Context, n storage.EndpointNotice) storage.NoticeResult {
	if n.Email == "" {
		return storage.NoticeResult{Done: true, Error: "the client has no email address"}
	}
	subject, text := noticeMail(n)
	res := r.deps.Notices.SendText(ctx, n.Email, subject, text)
	switch res.Outcome {
	case notifier.Sent:
		r.m.endpointNotices.Inc()
		return storage.NoticeResult{Done: true}
	case notifier.Failed:
		return storage.NoticeResult{Done: true, Error: errorText(res.Err)}
	default:
		return storage.NoticeResult{Error: errorText(res.Err)}
	}
}

// noticeMail is the subject and text of a notice's email.
func noticeMail(n storage.EndpointNotice) (subject, text string) {
	at := n.At.UTC().Format(time.RFC3339)
	switch n.Type {
	case storage.EndpointFailingEvent:
		return fmt.Sprintf("lockstream: the webhook endpoint of %s is failing", n.ClientName),
			fmt.Sprintf(`The webhook endpoint of client %s (%s) is failing, as of %s:
%s.

lockstream keeps retrying. If every attempt goes on failing, the endpoint is
disabled and its deliveries are kept until it is enabled again. The feed
(GET /v1/clients/%s/events) has every event meanwhile.
`, n.ClientName, n.WebhookURL, at, n.Detail, n.ClientID)
	case storage.EndpointRecoveredEvent:
		return fmt.Sprintf("lockstream: the webhook endpoint of %s recovered", n.ClientName),
			fmt.Sprintf(`The webhook endpoint of client %s (%s) works again:
%s.
`, n.ClientName, n.WebhookURL, n.Detail)
	}
	return fmt.Sprintf("lockstream: the webhook endpoint of %s was disabled", n.ClientName),
		fmt.Sprintf(`The webhook endpoint of client %s (%s) was disabled at %s:
%s.

Its deliveries are kept (state PAUSED) and nothing more is sent to it. Once the
endpoint works again, enable it with

    POST /v1/clients/%s/endpoint/enable

and the kept deliveries are sent, in order.
`, n.ClientName, n.WebhookURL, at, n.Detail, n.ClientID)
}

// ErrorTypeQuietHours is the last_error class of a member's push or email
// held back by the member's quiet hours: no attempt was made or used up.
const ErrorTypeQuietHours = "QUIET_HOURS"

// quietHolds decides which claimed member pushes and emails wait for the end
// of their member's quiet hours (on the retrier's clock), and how long: every
// non-critical one that falls in them. Critical ones go at once.
func (r *Retrier) quietHolds(claimed []storage.Delivery, targets map[string]storage.DeliveryTarget) map[string]time.Duration {
	var held map[string]time.Duration
	now := r.cfg.Now()
	for _, d := range claimed {
		t, ok := targets[d.ID]
		if !ok || t.Quiet == nil || t.QuietCritical {
			continue
		}
		if end, quiet := domain.QuietUntil(now, *t.Quiet, t.MemberTimezone); quiet {
			if held == nil {
				held = map[string]time.Duration{}
			}
			held[d.ID] = end.Sub(now)
		}
	}
	return held
}

// quietBack is the outcome of a delivery held for its member's quiet hours:
// due when they end, its attempt given back.
func (r *Retrier) quietBack(d storage.Delivery, wait time.Duration) outcome {
	r.m.quietHeld.Inc()
	at := r.cfg.Now()
	return outcome{d: d, state: storage.DeliveryRetry, next: at.Add(wait), at: at, since: d.EventAt, notSent: true,
		held: true, res: notifier.Result{Outcome: notifier.Retry, ErrorType: ErrorTypeQuietHours,
			Err: fmt.Errorf("the member's quiet hours last until %s", at.Add(wait).UTC().Format(time.RFC3339))}}
}
