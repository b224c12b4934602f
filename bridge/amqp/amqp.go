// Package amqp is lockstream's AMQP 0-9-1 bridge (RabbitMQ), after the CyVerse
// event recorder: it consumes a durable queue bound to a topic exchange
// (events.<category>.update.<type>), dispatches each message by category to a
// Handler, and settles it by the handler's answer — acknowledged once its effect
// is durable in Kafka, handed back for redelivery after a pause when the failure
// may pass, acknowledged and kept in the DLQ when it never can. Optionally it
// republishes lockstream.events to the exchange with publisher confirms, for
// other services.
//
// Nothing is acknowledged before Kafka acknowledged what the message became: a
// bridge killed or disconnected at any point loses nothing, and a message handled
// twice produces its readings twice, which the consumers take as repeated
// readings.
package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/lockstream/lockstream/bridge"
)

// Bridge consumes the queue and republishes events. Build it with New.
type Bridge struct {
	cfg      Config
	recorder NotificationRecorder
	mailer   bridge.Mailer
	metrics  *bridge.Metrics
	pubm     *publishMetrics
	logger   *slog.Logger
	alerter  *bridge.Alerter
	handlers map[string]Handler // by category, set up by Run
	topics   bridge.Topics
	client   *kgo.Client // set up by Run
}

// New returns a bridge; Run starts it. recorder records free-form notifications;
// nil rejects them as ReasonNotificationUnavailable. mailer sends the alert
// emails of cfg.Alert; it may be nil when cfg.Alert.To is empty. logger may be nil.
func New(cfg Config, recorder NotificationRecorder, mailer bridge.Mailer, reg prometheus.Registerer, logger *slog.Logger) (*Bridge, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Alert.To != "" && mailer == nil {
		return nil, errors.New("amqp bridge: an alert address is set but no mailer")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	reasons := append(bridge.ReadingReasons(), ReasonNotificationUnavailable)
	m, err := bridge.NewMetrics(reg, "amqp", reasons)
	if err != nil {
		return nil, err
	}
	for _, c := range []string{CategorySensor, CategoryNotification, ignoredUnknown, ignoredMalformed} {
		m.Ignored.WithLabelValues(c)
	}
	b := &Bridge{cfg: cfg, recorder: recorder, mailer: mailer, metrics: m, logger: logger,
		alerter: bridge.NewAlerter(cfg.Alert, mailer, logger),
		topics:  bridge.Topics{Readings: cfg.Stream.ReadingsTopic(), DLQ: cfg.Stream.DLQTopic()}}
	if cfg.PublishEvents {
		if b.pubm, err = newPublishMetrics(reg); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Run consumes (and republishes, when configured) until ctx is cancelled, then
// stops taking messages, finishes those in hand and returns nil. It reconnects
// with back-off whenever the broker goes away; it returns an error only when the
// broker refuses the topology (an existing exchange or queue of another kind).
func (b *Bridge) Run(ctx context.Context) error {
	client, err := bridge.NewKafkaClient(b.cfg.Stream, b.cfg.HandleTimeout, b.logger)
	if err != nil {
		return fmt.Errorf("amqp bridge: %w", err)
	}
	defer client.Close()
	b.client = client
	b.handlers = map[string]Handler{
		CategorySensor:       &readingsHandler{client: client, topics: b.topics, metrics: b.metrics, alerter: b.alerter},
		CategoryNotification: &notificationsHandler{recorder: b.recorder},
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return b.alerter.Run(gctx) })
	g.Go(func() error { return b.consume(gctx) })
	if b.cfg.PublishEvents {
		g.Go(func() error { return b.republish(gctx) })
	}
	return g.Wait()
}

// consume runs sessions, one per connection, until ctx ends.
func (b *Bridge) consume(ctx context.Context) error {
	backoff := bridge.Backoff{Min: b.cfg.ReconnectMin, Max: b.cfg.ReconnectMax}
	for {
		conn, err := dial(b.cfg.URL, b.cfg.ConnectionName)
		if err == nil {
			var handled bool
			handled, err = b.session(ctx, conn)
			_ = conn.Close()
			if handled {
				backoff.Reset()
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errTopology) {
			return fmt.Errorf("amqp bridge: %w", err)
		}
		b.logger.WarnContext(ctx, "amqp connection lost; reconnecting", "err", err)
		if !backoff.Wait(ctx) {
			return nil
		}
	}
}

// session declares the topology on conn and consumes until ctx ends or the
// connection or channel closes. It reports whether it handled any message.
func (b *Bridge) session(ctx context.Context, conn *amqp091.Connection) (bool, error) {
	queueType, err := declare(conn, b.cfg)
	if err != nil {
		return false, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("opening a channel: %w", err)
	}
	if err := ch.Qos(b.cfg.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("setting prefetch: %w", err)
	}
	const tag = "lockstream-bridge"
	deliveries, err := ch.Consume(b.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consuming %s: %w", b.cfg.Queue, err)
	}
	connClosed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	b.metrics.Connected.Set(1)
	defer b.metrics.Connected.Set(0)
	b.logger.InfoContext(ctx, "amqp bridge consuming", "queue", b.cfg.Queue, "queue_type", queueType,
		"exchange", b.cfg.Exchange, "binding", b.cfg.Binding, "prefetch", b.cfg.Prefetch)

	// As many workers as messages in hand: prefetch bounds both. A worker's
	// message is finished even when shutdown begins (work is not cancelled).
	work := context.WithoutCancel(ctx)
	var (
		wg      sync.WaitGroup
		handled = make(chan struct{})
		once    sync.Once
	)
	for range b.cfg.Prefetch {
		wg.Go(func() {
			for d := range deliveries {
				once.Do(func() { close(handled) })
				b.deliver(ctx, work, d)
			}
		})
	}
	var cause error
	select {
	case <-ctx.Done():
		// Stop the flow; the deliveries already here are handled and acked,
		// then the channel closes.
		if err := ch.Cancel(tag, false); err != nil {
			b.logger.WarnContext(work, "cancelling the amqp consumer", "err", err)
		}
	case e := <-connClosed:
		cause = closeError("connection", e)
	case e := <-chClosed:
		cause = closeError("channel", e)
		_ = conn.Close() // the workers' range ends with the connection
	}
	wg.Wait()
	_ = ch.Close()
	select {
	case <-handled:
		return true, cause
	default:
		return false, cause
	}
}

func closeError(what string, e *amqp091.Error) error {
	if e == nil {
		return fmt.Errorf("amqp %s closed", what)
	}
	return fmt.Errorf("amqp %s closed: %w", what, e)
}

// deliver hands d to its category's handler and settles it by the answer.
func (b *Bridge) deliver(ctx, work context.Context, d amqp091.Delivery) {
	b.metrics.Received.Inc()
	if d.Redelivered {
		b.metrics.Redelivered.Inc()
	}
	m := Message{RoutingKey: d.RoutingKey, Body: d.Body, MessageID: d.MessageId, Redelivered: d.Redelivered}
	category, typ, ok := parseRoutingKey(d.RoutingKey)
	h := b.handlers[category]
	switch {
	case !ok:
		b.settle(d, ignoredMalformed)
		return
	case h == nil:
		b.settle(d, ignoredUnknown)
		return
	}
	m.Category, m.Type = category, typ
	hctx, cancel := context.WithTimeout(work, b.cfg.HandleTimeout)
	err := h.Handle(hctx, m)
	if u, ok := bridge.AsUnrecoverable(err); ok {
		err = b.keep(hctx, m, u)
	}
	cancel()
	switch {
	case err == nil:
		b.ack(d)
	case errors.Is(err, ErrIgnored):
		b.settle(d, category)
	default:
		b.metrics.Retries.Inc()
		b.logger.WarnContext(work, "message failed; handing it back for redelivery", "routing_key", d.RoutingKey,
			"pause", b.cfg.RetryPause, "err", err)
		bridge.Sleep(ctx, b.cfg.RetryPause) // cut short by shutdown: the broker redelivers anyway
		if err := d.Nack(false, true); err != nil {
			b.logger.DebugContext(work, "nack failed; the broker redelivers the message when the channel closes", "err", err)
		}
	}
}

// keep puts an unrecoverable message in the DLQ, counts and reports it; an error
// (Kafka down) makes it recoverable.
func (b *Bridge) keep(ctx context.Context, m Message, u *bridge.Unrecoverable) error {
	source := "amqp:" + m.RoutingKey
	rec := b.topics.DLQRecord(nil, m.Body, u.Reason, u.Detail, source)
	if err := bridge.Produce(ctx, b.client, []*kgo.Record{rec}); err != nil {
		return fmt.Errorf("keeping an unrecoverable message (%s) in the DLQ: %w", u.Reason, err)
	}
	b.metrics.Rejected.WithLabelValues(u.Reason).Inc()
	b.alerter.Report(u.Reason, u.Detail, source)
	b.logger.Info("unrecoverable message kept in the DLQ", "routing_key", m.RoutingKey, "reason", u.Reason, "detail", u.Detail)
	return nil
}

// settle acknowledges a message that asks for nothing, counting it under label.
func (b *Bridge) settle(d amqp091.Delivery, label string) {
	b.metrics.Ignored.WithLabelValues(label).Inc()
	b.ack(d)
}

func (b *Bridge) ack(d amqp091.Delivery) {
	if err := d.Ack(false); err != nil {
		// The channel is gone: the broker redelivers the message to the next
		// consumer, which handles it again (a duplicate, never a loss).
		b.logger.Debug("ack failed; the message will be redelivered", "routing_key", d.RoutingKey, "err", err)
	}
}
