package main

import (
	"context"

	"golang.org/x/sync/errgroup"

	"github.com/lockstream/lockstream/escalation"
	"github.com/lockstream/lockstream/incident"
	"github.com/lockstream/lockstream/internal/settings"
)

// escalationBox runs escalation rounds: unseen messages → email and push
// deliveries in the outbox (package escalation); and, at the same interval,
// the incidents' intake and reminder rounds (package incident).
type escalationBox struct {
	Escalation escalation.Config
	Incidents  incident.Config
}

// RegisterSettings declares the escalation rounds' and the incidents'
// settings.
func (b *escalationBox) RegisterSettings(s *settings.Set) {
	b.Escalation.RegisterSettings(s)
	b.Incidents.RegisterSettings(s)
}

func (b *escalationBox) daemon(_ context.Context, n *node) (daemon, error) {
	cfg := b.Escalation
	cfg.Now = n.now
	e, err := escalation.New(cfg, escalation.NewPostgresStore(n.pg), n.reg, n.logger.With("daemon", "escalation"))
	if err != nil {
		return daemon{}, err
	}
	icfg := b.Incidents
	icfg.Interval = b.Escalation.Interval // LOCKSTREAM_ESCALATION_INTERVAL for both
	icfg.Now = n.now
	inc, err := incident.New(icfg, incident.NewPostgresStore(n.pg), n.reg, n.logger.With("daemon", "incident"))
	if err != nil {
		return daemon{}, err
	}
	return daemon{name: "escalation", run: func(ctx context.Context) error {
		g, ctx := errgroup.WithContext(ctx)
		g.Go(func() error { return e.Run(ctx) })
		g.Go(func() error { return inc.Run(ctx) })
		return g.Wait()
	}}, nil
}
