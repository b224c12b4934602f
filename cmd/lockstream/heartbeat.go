package main

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/internal/settings"
	"github.com/lockstream/lockstream/stream"
)

// heartbeatBox sweeps for silent sensors and publishes connection_lost.
type heartbeatBox struct {
	Heartbeat heartbeat.Config
	Flapping  consumer.Flapping
}

// RegisterSettings declares the heartbeat's settings and the flapping window it
// follows (an unstable sensor's loss waits for it).
func (b *heartbeatBox) RegisterSettings(s *settings.Set) {
	b.Heartbeat.RegisterSettings(s)
	b.Flapping.RegisterWindow(s)
}

// heartbeatStores are the heartbeat's statements on the node's stores.
func (n *node) heartbeatStores() heartbeat.Stores {
	return heartbeat.NewStores(n.pg, n.redis, n.ch)
}

// heartbeatTracker returns the node's one tracker, creating it on first use: the
// consumer records sightings through it, the API and the console read
// connections from it and tell it of the registry's changes.
func (n *node) heartbeatTracker(cfg heartbeat.Config) (*heartbeat.Tracker, error) {
	if n.tracker != nil {
		return n.tracker, nil
	}
	stores := n.heartbeatStores()
	cfg.Now = n.now
	t, err := heartbeat.NewTracker(cfg, stores.Redis, stores.Postgres, n.reg, n.logger.With("daemon", "heartbeat"))
	if err != nil {
		return nil, err
	}
	n.tracker = t
	return t, nil
}

func (b *heartbeatBox) daemon(_ context.Context, n *node) (daemon, error) {
	if err := n.requireBrokers(); err != nil {
		return daemon{}, err
	}
	cfg := b.Heartbeat
	cfg.FlapWindow, cfg.Now = b.Flapping.Window, n.now
	client, err := kgo.NewClient(append(stream.ClientOpts(n.stream), stream.WithLogger(n.logger),
		stream.ClientMetrics(n.reg, "heartbeat"))...)
	if err != nil {
		return daemon{}, fmt.Errorf("heartbeat: kafka client: %w", err)
	}
	logger := n.logger.With("daemon", "heartbeat")
	// Deadlines are judged by how far the state consumer has got, so a consumer
	// that lags or stalls never makes reporting sensors look lost.
	progress, err := stream.NewProgress(stream.ProgressConfig{Stream: n.stream, Group: consumer.DefaultGroup}, client, logger)
	if err != nil {
		client.Close()
		return daemon{}, err
	}
	deps := n.heartbeatStores().Deps(stream.NewEventPublisher(n.stream, client), progress)
	// A rebuild reads open losses from the history only once the history writer
	// (the history daemon's group, history.Config's default) has stored the
	// events published before it.
	backlog, err := stream.NewBacklog(client, history.DefaultGroup, n.stream.EventsTopic())
	if err != nil {
		client.Close()
		return daemon{}, err
	}
	deps.HistoryProgress = backlog
	d, err := heartbeat.New(cfg, deps, n.reg, logger)
	if err != nil {
		client.Close()
		return daemon{}, err
	}
	return daemon{name: "heartbeat", run: d.Run, close: client.Close}, nil
}
