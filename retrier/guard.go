package retrier

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/internal/contain"
	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/swrve"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/storage"
)

// guardSenders wraps every sender of deps so that a panic in one (or in a
// template it renders) does not end the process: the attempt is FAILED with
// error type OTHER and the panic's value and stack as its error, so the
// delivery is not claimed again, and the panic is logged and counted in
// lockstream_panics_total{where}. The retrier calls senders only through
// these wrappers.
func guardSenders(deps Deps, reg prometheus.Registerer, logger *slog.Logger) (Deps, error) {
	panics, err := contain.Counter(reg)
	if err != nil {
		return deps, err
	}
	g := guard{panics: panics, logger: logger}
	if deps.Webhook != nil {
		deps.Webhook = guardedWebhook{deps.Webhook, g}
	}
	if deps.Reports == nil {
		// Before Email is wrapped: the wrapper hides what else it can send.
		deps.Reports, _ = deps.Email.(ReportEmailSender)
	}
	if deps.Reports != nil {
		deps.Reports = guardedReports{deps.Reports, g}
	}
	if deps.Email != nil {
		e := guardedEmail{deps.Email, g}
		if u, ok := deps.Email.(UnseenEmailSender); ok {
			deps.Email = guardedUnseenEmail{e, u}
		} else {
			deps.Email = e
		}
	}
	if deps.Push != nil {
		deps.Push = guardedPush{deps.Push, g}
	}
	if deps.StandalonePush != nil {
		deps.StandalonePush = guardedStandalonePush{deps.StandalonePush, g}
	}
	if deps.Notices != nil {
		deps.Notices = guardedNotices{deps.Notices, g}
	}
	return deps, nil
}

// guard runs one attempt through notifier.Contain and reports a panic.
type guard struct {
	panics *prometheus.CounterVec
	logger *slog.Logger
}

func (g guard) call(ctx context.Context, channel storage.Channel, send func() notifier.Result) notifier.Result {
	res := notifier.Contain(send)
	if p, ok := contain.AsPanic(res.Err); ok {
		contain.Report(ctx, p, g.panics, g.logger, "channel", channel)
	}
	return res
}

type guardedWebhook struct {
	s WebhookSender
	g guard
}

func (w guardedWebhook) Send(ctx context.Context, t webhook.Target, n notifier.Notification) notifier.Result {
	return w.g.call(ctx, storage.ChannelWebhook, func() notifier.Result { return w.s.Send(ctx, t, n) })
}

type guardedEmail struct {
	s EmailSender
	g guard
}

func (e guardedEmail) Send(ctx context.Context, to string, n notifier.Notification) notifier.Result {
	return e.g.call(ctx, storage.ChannelEmail, func() notifier.Result { return e.s.Send(ctx, to, n) })
}

// guardedUnseenEmail is a guarded email sender that also mails escalations:
// only one whose sender does, so the retrier's check for it still holds.
type guardedUnseenEmail struct {
	guardedEmail
	u UnseenEmailSender
}

func (e guardedUnseenEmail) SendUnseen(ctx context.Context, to string, u notifier.Unseen) notifier.Result {
	return e.g.call(ctx, storage.ChannelEmail, func() notifier.Result { return e.u.SendUnseen(ctx, to, u) })
}

type guardedReports struct {
	s ReportEmailSender
	g guard
}

func (e guardedReports) SendPrepared(ctx context.Context, to, id, subject, text, html string) notifier.Result {
	return e.g.call(ctx, storage.ChannelEmail, func() notifier.Result { return e.s.SendPrepared(ctx, to, id, subject, text, html) })
}

type guardedPush struct {
	s PushSender
	g guard
}

func (p guardedPush) Send(ctx context.Context, t storage.PushTarget, n notifier.Notification) notifier.Result {
	return p.g.call(ctx, storage.ChannelSwrve, func() notifier.Result { return p.s.Send(ctx, t, n) })
}

type guardedStandalonePush struct {
	s StandalonePushSender
	g guard
}

func (p guardedStandalonePush) Send(ctx context.Context, push swrve.Push) notifier.Result {
	return p.g.call(ctx, storage.ChannelSwrve, func() notifier.Result { return p.s.Send(ctx, push) })
}

type guardedNotices struct {
	s NoticeSender
	g guard
}

func (n guardedNotices) SendText(ctx context.Context, to, subject, text string) notifier.Result {
	return n.g.call(ctx, storage.ChannelEmail, func() notifier.Result { return n.s.SendText(ctx, to, subject, text) })
}
