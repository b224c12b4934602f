package main

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/lockstream/lockstream/bridge"
	"github.com/lockstream/lockstream/bridge/amqp"
	"github.com/lockstream/lockstream/bridge/mqtt"
	"github.com/lockstream/lockstream/notifier/email"
)

// bridgeSettings are the settings of the intake bridges.
var bridgeSettings = []string{"amqp-url", "amqp-exchange", "amqp-queue", "amqp-prefetch", "amqp-publish-events",
	"mqtt-url", "mqtt-topic", "mqtt-client-id", "mqtt-inflight", "alert-email", "smtp-url"}

// bridgesConfigured reports whether either broker URL is set: only then does
// `all` run the bridges.
func bridgesConfigured(v *values) bool {
	return v.str("amqp-url") != "" || v.str("mqtt-url") != ""
}

// amqpConfig is the AMQP bridge's configuration from the settings.
func (n *node) amqpConfig() (amqp.Config, error) {
	prefetch, err := n.v.int("amqp-prefetch")
	if err != nil {
		return amqp.Config{}, err
	}
	publish, err := n.v.bool("amqp-publish-events")
	if err != nil {
		return amqp.Config{}, err
	}
	return amqp.Config{URL: n.v.str("amqp-url"), Exchange: n.v.str("amqp-exchange"), Queue: n.v.str("amqp-queue"),
		Prefetch: prefetch, PublishEvents: publish, Stream: n.stream,
		Alert: bridge.AlertConfig{To: n.v.str("alert-email")}}, nil
}

// bridgeDaemon runs the AMQP bridge, the MQTT bridge, or both: whichever URL is
// set.
func bridgeDaemon(_ context.Context, n *node) (daemon, error) {
	if err := n.requireBrokers(); err != nil {
		return daemon{}, err
	}
	if !bridgesConfigured(n.v) {
		return daemon{}, errors.New("bridge: set LOCKSTREAM_AMQP_URL / --amqp-url, LOCKSTREAM_MQTT_URL / --mqtt-url, or both")
	}
	var runs []func(context.Context) error
	if n.v.str("amqp-url") != "" {
		cfg, err := n.amqpConfig()
		if err != nil {
			return daemon{}, err
		}
		var mailer bridge.Mailer
		if cfg.Alert.To != "" {
			sender, err := email.New(email.Config{SMTPURL: n.v.str("smtp-url")}, n.logger)
			if err != nil {
				return daemon{}, fmt.Errorf("bridge: alert email: %w", err)
			}
			mailer = sender
		}
		// Free-form notifications go into the members' inboxes in Postgres.
		b, err := amqp.New(cfg, amqp.InboxRecorder{Store: n.pg}, mailer, n.reg, n.logger.With("daemon", "bridge", "bridge", "amqp"))
		if err != nil {
			return daemon{}, err
		}
		runs = append(runs, b.Run)
	}
	if n.v.str("mqtt-url") != "" {
		inflight, err := n.v.int("mqtt-inflight")
		if err != nil {
			return daemon{}, err
		}
		b, err := mqtt.New(mqtt.Config{URL: n.v.str("mqtt-url"), Topic: n.v.str("mqtt-topic"), ClientID: n.v.str("mqtt-client-id"),
			Inflight: inflight, Stream: n.stream}, n.reg, n.logger.With("daemon", "bridge", "bridge", "mqtt"))
		if err != nil {
			return daemon{}, err
		}
		runs = append(runs, b.Run)
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
func (n *node) notificationPublisher() (*amqp.NotificationPublisher, error) {
	if n.v.str("amqp-url") == "" {
		return nil, nil
	}
	cfg, err := n.amqpConfig()
	if err != nil {
		return nil, err
	}
	return amqp.NewNotificationPublisher(cfg)
}
