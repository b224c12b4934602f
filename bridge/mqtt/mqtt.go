// Package mqtt is lockstream's MQTT 5 bridge (Mosquitto and other brokers),
// through Eclipse Paho's autopaho: it subscribes at QoS 1 with a persistent
// session to a shared subscription ($share/<group>/<topic>), takes the sensor id
// from the last level of each message's topic and a reading JSON or a bare 0 or 1
// from its payload, produces it to the readings topic (bad input to the DLQ),
// and acknowledges the message only once Kafka acknowledged the record.
//
// Acknowledgements are manual and go out in the order the messages came, as
// MQTT requires; a message the bridge could not finish (Kafka down at shutdown,
// a crash, a lost connection) stays unacknowledged in the session and the broker
// sends it again when the bridge comes back. The broker holds the messages of an
// absent bridge only up to its own queue limit (Mosquitto's max_queued_messages).
//
// The bridge subscribes again on every connection, which Mosquitto before
// 2.0.12 (Debian 12's is 2.0.11) needs: it drops a session's $share
// subscriptions when the client reconnects to that session. Until one bridge of
// the group has subscribed again the group has no member there, and a message
// published meanwhile reaches no one: the broker discards it and says so in the
// PUBACK, reason code 0x10 (No matching subscribers). Right after a broker
// restart every bridge reconnects at once, so that window, a round trip long,
// exists at each restart; a sensor that must not lose a reading publishes it
// again on 0x10, or the broker is 2.0.12 or later.
package mqtt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/bridge"
)

// Bridge is the MQTT bridge. Build it with New.
type Bridge struct {
	cfg     Config
	server  *url.URL
	metrics *bridge.Metrics
	logger  *slog.Logger
	topics  bridge.Topics
	client  *kgo.Client // set up by Run

	// mu guards stopping against new work while shutdown waits for inflight.
	mu       sync.Mutex
	stopping bool
	inflight sync.WaitGroup
}

// New returns a bridge; Run starts it. logger may be nil.
func New(cfg Config, reg prometheus.Registerer, logger *slog.Logger) (*Bridge, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	server, _ := brokerURL(cfg.URL) // validated
	m, err := bridge.NewMetrics(reg, "mqtt", bridge.ReadingReasons())
	if err != nil {
		return nil, err
	}
	return &Bridge{cfg: cfg, server: server, metrics: m, logger: logger,
		topics: bridge.Topics{Readings: cfg.Stream.ReadingsTopic(), DLQ: cfg.Stream.DLQTopic()}}, nil
}

// Filter is the subscription the bridge makes: $share/<Group>/<Topic>.
func (b *Bridge) Filter() string {
	return "$share/" + b.cfg.Group + "/" + b.cfg.Topic
}

// Run connects (again and again, with back-off, whenever the connection drops)
// and bridges until ctx is cancelled; then it stops taking messages, waits up to
// DrainTimeout for those in hand, lets their acknowledgements go out and
// disconnects, keeping the session. It returns an error only when the broker
// refuses the subscription.
func (b *Bridge) Run(ctx context.Context) error {
	client, err := bridge.NewKafkaClient(b.cfg.Stream, b.cfg.ProduceTimeout, b.logger)
	if err != nil {
		return fmt.Errorf("mqtt bridge: %w", err)
	}
	defer client.Close()
	b.client = client

	refused := make(chan error, 1)
	// The connection outlives ctx: shutdown disconnects it after draining.
	cm, err := autopaho.NewConnection(context.WithoutCancel(ctx), b.clientConfig(ctx, refused))
	if err != nil {
		return fmt.Errorf("mqtt bridge: %w", err)
	}
	b.logger.InfoContext(ctx, "mqtt bridge starting", "broker", b.server.Redacted(), "filter", b.Filter(),
		"client_id", b.cfg.ClientID, "inflight", b.cfg.Inflight)
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-refused:
	}
	b.drain(ctx)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := cm.Disconnect(dctx); err != nil && !errors.Is(err, autopaho.ConnectionDownError) {
		b.logger.WarnContext(dctx, "disconnecting from the mqtt broker", "err", err)
	}
	b.metrics.Connected.Set(0)
	return runErr
}

// drain stops new work and waits for the messages in hand, then for paho to send
// their acknowledgements.
func (b *Bridge) drain(ctx context.Context) {
	b.mu.Lock()
	b.stopping = true
	b.mu.Unlock()
	done := make(chan struct{})
	go func() {
		b.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(b.cfg.DrainTimeout):
		b.logger.WarnContext(context.WithoutCancel(ctx), "stopping with mqtt messages unfinished; the broker sends them again", "waited", b.cfg.DrainTimeout)
	}
	// paho sends acknowledgements every AckInterval; there is no flush to call.
	time.Sleep(3 * b.cfg.AckInterval)
}

// clientConfig is autopaho's configuration: a persistent session, manual
// acknowledgements, Receive Maximum = Inflight, subscribing on every connection.
func (b *Bridge) clientConfig(ctx context.Context, refused chan<- error) autopaho.ClientConfig {
	expiry := uint32(b.cfg.SessionExpiry / time.Second)
	inflight := uint16(b.cfg.Inflight)
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{b.server},
		KeepAlive:                     uint16(b.cfg.KeepAlive / time.Second),
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         expiry,
		ReconnectBackoff:              autopaho.NewExponentialBackoff(b.cfg.ReconnectMin, b.cfg.ReconnectMax, b.cfg.ReconnectMin, 2),
		ConnectTimeout:                10 * time.Second,
		AttemptConnection:             dial,
		ConnectPacketBuilder: func(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			if cp.Properties == nil {
				cp.Properties = &paho.ConnectProperties{}
			}
			cp.Properties.ReceiveMaximum = &inflight
			return cp, nil
		},
		OnConnectionUp: func(cm *autopaho.ConnectionManager, ca *paho.Connack) {
			b.logger.InfoContext(ctx, "mqtt connected", "session_present", ca.SessionPresent)
			go b.subscribe(ctx, cm, refused)
		},
		OnConnectionDown: func() bool {
			b.metrics.Connected.Set(0)
			b.logger.WarnContext(ctx, "mqtt connection lost; reconnecting")
			return true
		},
		OnConnectError: func(err error) {
			b.logger.WarnContext(ctx, "mqtt connection attempt failed", "err", err)
		},
		ClientConfig: paho.ClientConfig{
			ClientID:                   b.cfg.ClientID,
			OnPublishReceived:          []func(paho.PublishReceived) (bool, error){b.receive},
			EnableManualAcknowledgment: true,
			SendAcksInterval:           b.cfg.AckInterval,
			OnClientError: func(err error) {
				b.logger.DebugContext(ctx, "mqtt client error", "err", err)
			},
			OnServerDisconnect: func(d *paho.Disconnect) {
				b.logger.WarnContext(ctx, "the mqtt broker disconnected the bridge", "reason_code", d.ReasonCode)
			},
		},
	}
	if u := b.server.User; u != nil {
		cfg.ConnectUsername = u.Username()
		if p, ok := u.Password(); ok {
			cfg.ConnectPassword = []byte(p)
		}
	}
	return cfg
}

// subscribe subscribes on a new connection (the session may hold the
// subscription already; subscribing again is harmless). A refusal is reported
// on refused: no reconnection can fix it.
func (b *Bridge) subscribe(ctx context.Context, cm *autopaho.ConnectionManager, refused chan<- error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	suback, err := cm.Subscribe(sctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: b.Filter(), QoS: 1}}})
	switch {
	case err != nil && suback != nil:
		select {
		case refused <- fmt.Errorf("mqtt bridge: the broker refused the subscription to %s (reason codes %v): %w", b.Filter(), suback.Reasons, err):
		default:
		}
	case err != nil:
		b.logger.WarnContext(ctx, "mqtt subscribe failed; retrying on the next connection", "filter", b.Filter(), "err", err)
	default:
		b.metrics.Connected.Set(1)
		b.logger.InfoContext(ctx, "mqtt subscribed", "filter", b.Filter())
	}
}

// message is one message in hand: what it became and how to acknowledge it.
type message struct {
	parsed  bridge.Parsed
	records []*kgo.Record
	client  *paho.Client
	packet  *paho.Publish
}

// receive takes one message (paho calls it for each, in order, on one
// goroutine): it must not block on Kafka.
func (b *Bridge) receive(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	b.metrics.Received.Inc()
	if p.Duplicate() {
		b.metrics.Redelivered.Inc()
	}
	b.mu.Lock()
	if b.stopping {
		b.mu.Unlock()
		return true, nil // never acknowledged: the broker sends it again to the next session
	}
	b.inflight.Add(1)
	b.mu.Unlock()
	sensorID := p.Topic[strings.LastIndexByte(p.Topic, '/')+1:]
	parsed := b.topics.SensorPayload(sensorID, p.Payload, "mqtt:"+p.Topic)
	b.produce(&message{parsed: parsed, records: parsed.Records(), client: pr.Client, packet: p})
	return true, nil
}

// produce sends m's records to Kafka; once acknowledged, m is acknowledged to
// the broker. A failure is retried after RetryPause, with fresh records, until
// it succeeds or the bridge stops (m then stays unacknowledged).
func (b *Bridge) produce(m *message) {
	bridge.ProduceAsync(context.Background(), b.client, m.records, func(err error) {
		if err != nil {
			b.retry(m, err)
			return
		}
		b.metrics.Produced.Add(float64(len(m.parsed.Readings)))
		for _, r := range m.parsed.Rejects {
			b.metrics.Rejected.WithLabelValues(r.Reason).Inc()
		}
		if err := m.client.Ack(m.packet); err != nil {
			b.logger.Debug("mqtt ack failed; the broker sends the message again", "topic", m.packet.Topic, "err", err)
		}
		b.inflight.Done()
	})
}

func (b *Bridge) retry(m *message, err error) {
	b.metrics.Retries.Inc()
	b.mu.Lock()
	stopping := b.stopping
	b.mu.Unlock()
	if stopping {
		b.inflight.Done()
		return
	}
	b.logger.Warn("producing an mqtt message failed; retrying", "topic", m.packet.Topic, "pause", b.cfg.RetryPause, "err", err)
	time.AfterFunc(b.cfg.RetryPause, func() {
		m.records = bridge.Fresh(m.records)
		b.produce(m)
	})
}
