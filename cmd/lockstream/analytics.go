package main

import "github.com/lockstream/lockstream/analytics"

// analytics is the history's reader for analysts: ClickHouse through the
// node's connection, scopes resolved in the registry's tables.
func (n *node) analytics() *analytics.Store {
	return analytics.New(n.ch.Conn(), analytics.NewPostgresScopes(n.pg.Pool()))
}
