package main

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/lockstream/lockstream/bridge"
	"github.com/lockstream/lockstream/bridge/amqp"
	"github.com/lockstream/lockstream/bridge/mqtt"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/internal/settings"
	"github.com/lockstream/lockstream/notifier/email"
	"github.com/lockstream/lockstream/stream"
)

// bridgeBox is the intake bridges: AMQP, MQTT, or both, whichever URL is set.
type bridgeBox struct {
	AMQP amqp.Config
	MQTT mqtt.Config
	// Email sends the AMQP bridge's alerts.
	Email email.Config
}

// RegisterSettings declares both bridges' settings and the alerts' SMTP server.
func (b *bridgeBox) RegisterSettings(s *settings.Set) {
	s.Register(&b.AMQP, &b.MQTT, &b.Email)
}

// configured reports whether either broker URL is set: only then does `all` run
// the bridges.
func (b *bridgeBox) configured() bool {
	return b.AMQP.URL != "" || b.MQTT.URL != ""
}

// daemon runs the AMQP bridge, the MQTT bridge, or both: whichever URL is set.
func (b *bridgeBox) daemon(_ context.Context, n *node) (daemon, error) {
	if err := n.requireBrokers(); err != nil {
		return daemon{}, err
	}
	if !b.configured() {
		return daemon{}, errors.New("bridge: set LOCKSTREAM_AMQP_URL / --amqp-url, LOCKSTREAM_MQTT_URL / --mqtt-url, or both")
	}
	var runs []func(context.Context) error
	if b.AMQP.URL != "" {
		cfg := b.AMQP
		cfg.Stream = n.stream
		var mailer bridge.Mailer
		if cfg.Alert.To != "" {
			sender, err := email.New(b.Email, n.logger)
			if err != nil {
				return daemon{}, fmt.Errorf("bridge: alert email: %w", err)
			}
			mailer = sender
		}
		// Free-form notifications go into the members' inboxes in Postgres.
		a, err := amqp.New(cfg, amqp.InboxRecorder{Store: inbox.NewPostgresStore(n.pg)}, mailer, n.reg, n.logger.With("daemon", "bridge", "bridge", "amqp"))
		if err != nil {
			return daemon{}, err
		}
		runs = append(runs, a.Run)
	}
	if b.MQTT.URL != "" {
		cfg := b.MQTT
		cfg.Stream = n.stream
		m, err := mqtt.New(cfg, n.reg, n.logger.With("daemon", "bridge", "bridge", "mqtt"))
		if err != nil {
			return daemon{}, err
		}
		runs = append(runs, m.Run)
	}
	return daemon{name: "bridge", run: func(ctx context.Context) error {
		g, ctx := errgroup.WithContext(ctx)
		for _, run := range runs {
			g.Go(func() error { return run(ctx) })
		}
		return g.Wait()
	}}, nil
}

// notificationPublisher returns the publisher of POST /notification when AMQP is
// configured, nil otherwise.
func notificationPublisher(cfg amqp.Config, st stream.Config) (*amqp.NotificationPublisher, error) {
	if cfg.URL == "" {
		return nil, nil
	}
	cfg.Stream = st
	return amqp.NewNotificationPublisher(cfg)
}
