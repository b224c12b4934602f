package main

import "github.com/lockstream/lockstream/analytics"

// analytics is the history's reader for analysts: ClickHouse through the
// node's connection; scopes and site outages read from the registry's tables.
func (n *node) analytics() *analytics.Store {
	pg := analytics.NewPostgresScopes(n.pg.Pool())
	return analytics.New(n.ch.Conn(), pg, analytics.WithOutages(pg))
}
