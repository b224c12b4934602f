package main

import (
	"context"
	"fmt"

	"github.com/lockstream/lockstream/maintain"
)

// maintainDaemon keeps the stores bounded and mails the clients' weekly
// reports (package maintain).
func maintainDaemon(_ context.Context, n *node) (daemon, error) {
	retention, err := maintain.ParseRetention(n.v.str("retention"))
	if err != nil {
		return daemon{}, fmt.Errorf("--retention: %w", err)
	}
	historyRetention, err := maintain.ParseRetention(n.v.str("history-retention"))
	if err != nil {
		return daemon{}, fmt.Errorf("--history-retention: %w", err)
	}
	interval, err := n.v.duration("maintain-interval")
	if err != nil {
		return daemon{}, err
	}
	m, err := maintain.New(maintain.Config{Retention: retention, HistoryRetention: historyRetention, Interval: interval},
		maintain.NewPostgresStore(n.pg), maintain.NewClickHouseStore(n.ch), n.reg, n.logger.With("daemon", "maintain"),
		maintain.WithReports(maintain.NewPostgresStore(n.pg), n.analytics()))
	if err != nil {
		return daemon{}, err
	}
	return daemon{name: "maintain", run: m.Run}, nil
}
