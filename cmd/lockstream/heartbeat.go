package main

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/webapi"
)

// heartbeatConfig is the heartbeat configuration of a node.
func (n *node) heartbeatConfig() (heartbeat.Config, error) {
	timeout, err := n.v.duration("heartbeat-timeout")
	if err != nil {
		return heartbeat.Config{}, err
	}
	sweep, err := n.v.duration("heartbeat-sweep-interval")
	if err != nil {
		return heartbeat.Config{}, err
	}
	siteMin, err := n.v.int("site-outage-min")
	if err != nil {
		return heartbeat.Config{}, err
	}
	siteHold, err := n.v.duration("site-hold")
	if err != nil {
		return heartbeat.Config{}, err
	}
	flapWindow, err := n.v.duration("flap-window")
	if err != nil {
		return heartbeat.Config{}, err
	}
	return heartbeat.Config{Timeout: timeout, SweepInterval: sweep, SiteOutageMin: siteMin, SiteHold: siteHold,
		FlapWindow: flapWindow}, nil
}

// heartbeatTracker returns the node's one tracker, creating it on first use: the
// consumer records sightings through it and the API reads connections from it.
func (n *node) heartbeatTracker() (*heartbeat.Tracker, error) {
	if n.tracker != nil {
		return n.tracker, nil
	}
	cfg, err := n.heartbeatConfig()
	if err != nil {
		return nil, err
	}
	t, err := heartbeat.NewTracker(cfg, n.redis, n.pg, n.reg, n.logger.With("daemon", "heartbeat"))
	if err != nil {
		return nil, err
	}
	n.tracker = t
	return t, nil
}

// heartbeatDaemon sweeps for silent sensors and publishes connection_lost.
func heartbeatDaemon(_ context.Context, n *node) (daemon, error) {
	if err := n.requireBrokers(); err != nil {
		return daemon{}, err
	}
	cfg, err := n.heartbeatConfig()
	if err != nil {
		return daemon{}, err
	}
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
	d, err := heartbeat.New(cfg, heartbeat.Deps{
		Store: n.redis, Registry: n.pg, History: n.ch,
		Publisher: stream.NewEventPublisher(n.stream, client),
		Progress:  progress,
		States:    n.pg, OpenAlerts: n.pg,
		Sites: n.pg, SiteStore: n.redis, Maintenance: n.pg, Flapping: n.pg,
	}, n.reg, logger)
	if err != nil {
		client.Close()
		return daemon{}, err
	}
	return daemon{name: "heartbeat", run: d.Run, close: client.Close}, nil
}

// heartbeatHooks keeps the tracker in step with the registry as the admin API
// changes it, and lists lost sensors for it.
type heartbeatHooks struct {
	tracker *heartbeat.Tracker
	pg      *storage.Postgres
}

// SensorCreated starts the sensor's deadline at registration, so one that never
// reports is still declared lost; a timeout given at creation applies from the
// start (the tracker's cache of timeouts does not know the sensor yet).
func (h heartbeatHooks) SensorCreated(ctx context.Context, sensorID string, createdAt time.Time) error {
	s, err := h.pg.GetSensor(ctx, sensorID)
	if err != nil {
		return err
	}
	if s.HeartbeatTimeout > 0 {
		if err := h.tracker.SetTimeout(ctx, sensorID, s.HeartbeatTimeout); err != nil {
			return err
		}
	}
	return h.tracker.Register(ctx, sensorID, createdAt)
}

// SensorUpdated applies a changed heartbeat timeout at once.
func (h heartbeatHooks) SensorUpdated(ctx context.Context, sensorID string) error {
	s, err := h.pg.GetSensor(ctx, sensorID)
	if err != nil {
		return err
	}
	return h.tracker.SetTimeout(ctx, sensorID, s.HeartbeatTimeout)
}

// SensorDeleted stops tracking the sensor.
func (h heartbeatHooks) SensorDeleted(ctx context.Context, sensorID string) error {
	return h.tracker.Forget(ctx, sensorID)
}

// SensorStatuses asks the tracker about a page of sensors at once.
func (h heartbeatHooks) SensorStatuses(ctx context.Context, sensorIDs []string) (map[string]webapi.SensorConnection, error) {
	statuses, err := h.tracker.Statuses(ctx, sensorIDs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]webapi.SensorConnection, len(statuses))
	for id, st := range statuses {
		out[id] = webapi.SensorConnection{LastSeen: st.LastSeen, Connection: st.Connection}
	}
	return out, nil
}

// LostSensorIDs lists the sensors whose connection is lost, a page of the lost
// index; the API then asks for their connections with the page's other sensors.
func (h heartbeatHooks) LostSensorIDs(ctx context.Context, page storage.Page) ([]string, error) {
	return h.tracker.LostIDs(ctx, page)
}
