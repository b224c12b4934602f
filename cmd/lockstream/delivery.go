package main

import (
	"context"
	"time"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/notifier/email"
	"github.com/lockstream/lockstream/notifier/swrve"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/retrier"
)

// fanoutDaemon turns events into notification and delivery rows in the outbox.
func fanoutDaemon(_ context.Context, n *node) (daemon, error) {
	if err := n.requireBrokers(); err != nil {
		return daemon{}, err
	}
	writers, err := n.v.int("fanout-writers")
	if err != nil {
		return daemon{}, err
	}
	f, err := fanout.New(fanout.Config{Stream: n.stream, Writers: writers}, n.pg, n.reg, n.logger.With("daemon", "fanout"))
	if err != nil {
		return daemon{}, err
	}
	return daemon{name: "fanout", run: f.Run}, nil
}

// retrierDaemon delivers due outbox rows through the webhook, email and Swrve
// senders.
func retrierDaemon(_ context.Context, n *node) (daemon, error) {
	maxAttempts, err := n.v.int("retry-max-attempts")
	if err != nil {
		return daemon{}, err
	}
	backoffBase, err := n.v.duration("retry-backoff-base")
	if err != nil {
		return daemon{}, err
	}
	lease, err := n.v.duration("retry-lease")
	if err != nil {
		return daemon{}, err
	}
	allowPrivate, err := n.v.bool("webhook-allow-private")
	if err != nil {
		return daemon{}, err
	}
	disableAfter, err := n.v.duration("endpoint-disable-after")
	if err != nil {
		return daemon{}, err
	}
	disableMinFailures, err := n.v.int("endpoint-disable-min-failures")
	if err != nil {
		return daemon{}, err
	}
	workers, err := n.v.int("retry-workers")
	if err != nil {
		return daemon{}, err
	}
	perEndpoint, err := n.v.int("webhook-endpoint-concurrency")
	if err != nil {
		return daemon{}, err
	}
	logger := n.logger.With("daemon", "retrier")
	webhooks, err := webhook.New(webhook.Config{AllowPrivate: allowPrivate, PerEndpointConcurrency: perEndpoint}, logger)
	if err != nil {
		return daemon{}, err
	}
	mail, err := email.New(email.Config{SMTPURL: n.v.str("smtp-url")}, logger)
	if err != nil {
		webhooks.Close()
		return daemon{}, err
	}
	swrveRate, err := n.v.float("swrve-rate")
	if err != nil {
		webhooks.Close()
		return daemon{}, err
	}
	// Every retrier process takes its Swrve turns from Redis: together they
	// keep LOCKSTREAM_SWRVE_RATE.
	push, err := swrve.New(swrve.Config{URL: n.v.str("swrve-url"), Rate: swrveRate, PushKeysFile: n.v.str("swrve-push-keys"),
		Redis: n.redis}, n.reg, logger)
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
	cfg := retrier.Config{MaxAttempts: maxAttempts, BackoffBase: backoffBase, Workers: workers, PushWorkers: push.PoolSize(),
		DisableAfter: disableAfter, DisableMinFailures: disableMinFailures}
	r, err := retrier.New(leaseConfig(cfg, lease),
		retrier.Deps{Store: n.pg, Attempts: n.ch, Webhook: webhooks, Email: mail, Push: push.Notifications(), StandalonePush: push,
			Endpoints: n.pg, Limiter: n.redis, Notices: mail, Wakeups: n.pg},
		n.reg, logger)
	if err != nil {
		closeSenders()
		return daemon{}, err
	}
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
