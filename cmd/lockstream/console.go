package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/lockstream/lockstream/console"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/incident"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/stream"
)

// newConsole builds the operator console of an API process: the registry and the
// outbox in Postgres, its sessions in Redis, the analysts' reads of the history,
// the heartbeat's counts and tracker, and the events topic for the live view
// when Kafka is configured.
// memberTokenIdle is LOCKSTREAM_MEMBER_TOKEN_IDLE, which the console's
// sign-in applies as the API does.
func newConsole(n *node, adminToken string, memberTokenIdle time.Duration, tracker *heartbeat.Tracker) (*console.Console, error) {
	reg := registry.New(n.pg)
	deps := console.Deps{Registry: reg, Members: reg, Inbox: inbox.NewPostgresStore(n.pg), Deliveries: n.pg, Sessions: console.NewRedisStore(n.redis),
		Heartbeat: n.heartbeatStores().Redis, Connections: tracker, History: n.analytics(),
		Incidents: incident.NewAPIStore(incident.NewPostgresStore(n.pg))}
	if len(n.stream.Brokers) > 0 {
		deps.Events = eventTail{cfg: n.stream, logger: n.logger.With("daemon", "console")}
	}
	return console.New(console.Config{AdminToken: adminToken, MemberTokenIdle: memberTokenIdle, Now: n.now}, deps, n.reg,
		n.logger.With("daemon", "console"))
}

// eventTail follows the events topic for the console's live view.
type eventTail struct {
	cfg    stream.Config
	logger *slog.Logger
}

// TailEvents implements console.EventTail.
func (t eventTail) TailEvents(ctx context.Context, since time.Time, fn func(event.Event)) error {
	return stream.TailEvents(ctx, t.cfg, since, t.logger, fn)
}
