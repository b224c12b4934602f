package main

import (
	"context"
	"time"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/internal/settings"
	"github.com/lockstream/lockstream/notifier/email"
	"github.com/lockstream/lockstream/notifier/swrve"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/retrier"
)

// fanoutBox turns events into notification and delivery rows in the outbox.
type fanoutBox struct {
	Fanout fanout.Config
}

// RegisterSettings declares the fan-out's settings.
func (b *fanoutBox) RegisterSettings(s *settings.Set) { b.Fanout.RegisterSettings(s) }

func (b *fanoutBox) daemon(_ context.Context, n *node) (daemon, error) {
	if err := n.requireBrokers(); err != nil {
		return daemon{}, err
	}
	cfg := b.Fanout
	cfg.Stream = n.stream
	// With the retrier in this process (`all`), deliveries go to it as they
	// commit, claimed already.
	cfg.Handoff = n.handoff
	cfg.Now = n.now
	f, err := fanout.New(cfg, fanout.NewPostgresStore(n.pg), n.reg, n.logger.With("daemon", "fanout"))
	if err != nil {
		return daemon{}, err
	}
	return daemon{name: "fanout", run: f.Run}, nil
}

// retrierBox delivers due outbox rows through the webhook, email and Swrve
// senders.
type retrierBox struct {
	Retrier retrier.Config
	Webhook webhook.Config
	Email   email.Config
	Swrve   swrve.Config
}

// RegisterSettings declares the retrier's settings and its senders'.
func (b *retrierBox) RegisterSettings(s *settings.Set) {
	s.Register(&b.Retrier, &b.Webhook, &b.Email, &b.Swrve)
}

func (b *retrierBox) daemon(_ context.Context, n *node) (daemon, error) {
	logger := n.logger.With("daemon", "retrier")
	webhookCfg := b.Webhook
	webhookCfg.Now = n.now
	webhooks, err := webhook.New(webhookCfg, logger)
	if err != nil {
		return daemon{}, err
	}
	mail, err := email.New(b.Email, logger)
	if err != nil {
		webhooks.Close()
		return daemon{}, err
	}
	// Every retrier process takes its Swrve turns from Redis: together they
	// keep LOCKSTREAM_SWRVE_RATE.
	swrveCfg := b.Swrve
	swrveCfg.Redis = n.redis
	push, err := swrve.New(swrveCfg, n.reg, logger)
	if err != nil {
		webhooks.Close()
		return daemon{}, err
	}
	closeSenders := func() {
		webhooks.Close()
		push.Close()
	}
	// As many push workers as the Swrve pool has slots: the sender's rate and
	// pool pace the requests, and no claimed push waits for a worker.
	cfg := b.Retrier
	cfg.PushWorkers, cfg.Now = push.PoolSize(), n.now
	r, err := retrier.New(leaseConfig(cfg, cfg.Lease),
		retrier.Deps{Store: n.pg, Attempts: n.ch, Webhook: webhooks, Email: mail, Push: push.Notifications(), StandalonePush: push,
			Endpoints: n.pg, Limiter: n.redis, Notices: mail, Wakeups: n.pg},
		n.reg, logger)
	if err != nil {
		closeSenders()
		return daemon{}, err
	}
	n.handoff = r
	return daemon{name: "retrier", run: r.Run, close: closeSenders}, nil
}

// leaseConfig sets the lease of cfg. A lease must outlast an attempt, so a lease
// shorter than the default attempt timeout shortens that timeout to half the lease,
// and expired leases are looked for at least every half lease, so a crashed
// retrier's deliveries come back about one lease after their claim.
func leaseConfig(cfg retrier.Config, lease time.Duration) retrier.Config {
	cfg.Lease = lease
	if lease <= 0 {
		return cfg // zero is the default, and Validate names a negative one
	}
	if lease <= retrier.DefaultAttemptTimeout {
		cfg.AttemptTimeout = lease / 2
	}
	cfg.LeaseSweepInterval = min(retrier.DefaultLeaseSweepInterval, lease/2)
	return cfg
}
