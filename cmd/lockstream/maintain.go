package main

import (
	"context"

	"github.com/lockstream/lockstream/internal/settings"
	"github.com/lockstream/lockstream/maintain"
)

// maintainBox keeps the stores bounded, repairs the analytics rollups of the
// last closed month and mails the clients' weekly reports (package maintain).
type maintainBox struct {
	Maintain maintain.Config
}

// RegisterSettings declares maintain's settings.
func (b *maintainBox) RegisterSettings(s *settings.Set) { b.Maintain.RegisterSettings(s) }

func (b *maintainBox) daemon(_ context.Context, n *node) (daemon, error) {
	an := n.analytics()
	cfg := b.Maintain
	cfg.Now = n.now
	m, err := maintain.New(cfg,
		maintain.NewPostgresStore(n.pg), maintain.NewClickHouseStore(n.ch), n.reg, n.logger.With("daemon", "maintain"),
		maintain.WithReports(maintain.NewPostgresStore(n.pg), an), maintain.WithRollupRepair(an))
	if err != nil {
		return daemon{}, err
	}
	return daemon{name: "maintain", run: m.Run}, nil
}
