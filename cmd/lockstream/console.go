package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/lockstream/lockstream/console"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/stream"
)

// newConsole builds the operator console of an API process: the registry and the
// outbox in Postgres, sessions and counts in Redis, history in ClickHouse, the
// heartbeat's view through hooks, and the events topic for the live view when
// Kafka is configured.
func newConsole(n *node, adminToken string, hooks heartbeatHooks) (*console.Console, error) {
	deps := console.Deps{Registry: n.pg, Members: n.pg, Inbox: n.pg, Deliveries: n.pg, Sessions: n.redis, Heartbeat: n.redis,
		Connections: hooks, History: n.analytics()}
	if len(n.stream.Brokers) > 0 {
		deps.Events = eventTail{cfg: n.stream, logger: n.logger.With("daemon", "console")}
	}
	return console.New(console.Config{AdminToken: adminToken}, deps, n.reg, n.logger.With("daemon", "console"))
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

// Status is the heartbeat's view of one sensor, for the console.
func (h heartbeatHooks) Status(ctx context.Context, sensorID string) (time.Time, string, error) {
	return h.tracker.Status(ctx, sensorID)
}

// LostSensors lists lost sensors with when they were last seen, for the console.
func (h heartbeatHooks) LostSensors(ctx context.Context, page storage.Page) ([]console.LostSensor, error) {
	lost, err := h.tracker.Lost(ctx, page)
	if err != nil {
		return nil, err
	}
	out := make([]console.LostSensor, len(lost))
	for i, l := range lost {
		out[i] = console.LostSensor{ID: l.SensorID, LastSeen: l.LastSeen, LostAt: l.LostAt}
	}
	return out, nil
}
