package main

import (
	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/incident"
)

// analytics is the history's reader for analysts: ClickHouse through the
// node's connection; scopes and site outages read from the registry's tables,
// a report's incidents from the incident box's.
func (n *node) analytics() *analytics.Store {
	pg := analytics.NewPostgresScopes(n.pg.Pool())
	return analytics.New(n.ch.Conn(), pg, analytics.WithOutages(pg), analytics.WithIncidents(incident.NewPostgresStore(n.pg)))
}
