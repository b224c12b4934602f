package main

import (
	"context"

	"github.com/lockstream/lockstream/escalation"
)

// escalationDaemon runs escalation rounds: unseen messages → email and push
// deliveries in the outbox (package escalation).
func escalationDaemon(_ context.Context, n *node) (daemon, error) {
	interval, err := n.v.duration("escalation-interval")
	if err != nil {
		return daemon{}, err
	}
	emailAfter, err := n.v.duration("escalate-email-after")
	if err != nil {
		return daemon{}, err
	}
	pushAfter, err := n.v.duration("escalate-push-after")
	if err != nil {
		return daemon{}, err
	}
	limit, err := n.v.int("escalation-limit")
	if err != nil {
		return daemon{}, err
	}
	e, err := escalation.New(escalation.Config{Interval: interval, EmailAfter: emailAfter, PushAfter: pushAfter,
		Limit: limit},
		escalation.NewPostgresStore(n.pg), n.reg, n.logger.With("daemon", "escalation"))
	if err != nil {
		return daemon{}, err
	}
	return daemon{name: "escalation", run: e.Run}, nil
}
