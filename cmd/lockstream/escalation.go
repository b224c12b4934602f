package main

import (
	"context"

	"github.com/lockstream/lockstream/escalation"
	"github.com/lockstream/lockstream/internal/settings"
)

// escalationBox runs escalation rounds: unseen messages → email and push
// deliveries in the outbox (package escalation).
type escalationBox struct {
	Escalation escalation.Config
}

// RegisterSettings declares the escalation rounds' settings.
func (b *escalationBox) RegisterSettings(s *settings.Set) { b.Escalation.RegisterSettings(s) }

func (b *escalationBox) daemon(_ context.Context, n *node) (daemon, error) {
	cfg := b.Escalation
	cfg.Now = n.now
	e, err := escalation.New(cfg, escalation.NewPostgresStore(n.pg), n.reg, n.logger.With("daemon", "escalation"))
	if err != nil {
		return daemon{}, err
	}
	return daemon{name: "escalation", run: e.Run}, nil
}
