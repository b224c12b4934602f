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
// readings, and records its notification once (InboxRecorder keys it by its
// message-id).
package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/lockstream/lockstream/bridge"
	"github.com/lockstream/lockstream/stream"
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
	client   *kgo.Client       // set up by Run
	events   *stream.Group     // republishes lockstream.events; nil unless PublishEvents
	pub      *confirmPublisher // what events publishes through
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
	reasons := append(bridge.ReadingReasons(), ReasonNotificationUnavailable, ReasonInvalidNotification, ReasonUnknownAddressee)
	m, err := bridge.NewMetrics(reg, "amqp", reasons)
	if err != nil {
		return nil, err
	}
	for _, c := range []string{CategorySensor, CategoryNotification, ignoredUnknown, ignoredMalformed, ignoredDuplicate} {
		m.Ignored.WithLabelValues(c)
	}
	b := &Bridge{cfg: cfg, recorder: recorder, mailer: mailer, metrics: m, logger: logger,
		alerter: bridge.NewAlerter(cfg.Alert, mailer, logger),
		topics:  bridge.Topics{Readings: cfg.Stream.ReadingsTopic(), DLQ: cfg.Stream.DLQTopic()}}
	if cfg.PublishEvents {
		if b.pubm, err = newPublishMetrics(reg); err != nil {
			return nil, err
		}
		if b.events, err = newRepublisher(b, reg); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Run consumes (and republishes, when configured) until ctx is cancelled, then
// stops taking messages, finishes those in hand and returns nil. It reconnects
// with back-off whenever the broker goes away; it returns an error only when the
// broker refuses the topology (an existing exchange or queue of another kind), or
// when it republishes and Kafka cannot be reached at start (stream.Group.Run).
func (b *Bridge) Run(ctx context.Context) error {
	client, err := bridge.NewKafkaClient(b.cfg.Stream, b.cfg.HandleTimeout, b.logger)
	if err != nil {
		return fmt.Errorf("amqp bridge: %w", err)
	}
	defer client.Close()
	b.client = client
	b.handlers = map[string]Handler{
		CategorySensor:       &readingsHandler{client: client, topics: b.topics, metrics: b.metrics, alerter: b.alerter},
		CategoryNotification: &notificationsHandler{recorder: b.recorder, timeout: b.cfg.HandleTimeout},
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

	// One goroutine hands the deliveries to their handlers in order; prefetch
	// bounds how many are in hand. They are finished even when shutdown begins.
	s := &settler{b: b, ctx: ctx, acks: newAcker(ch, b.logger)}
	dispatched := make(chan int, 1)
	work := context.WithoutCancel(ctx)
	go func() {
		n := 0
		for d := range deliveries {
			n++
			s.pending.Add(1)
			b.deliver(work, s, d)
		}
		dispatched <- n
	}()
	var cause error
	select {
	case <-ctx.Done():
		// Stop the flow; the deliveries already here are handled and settled.
		if err := ch.Cancel(tag, false); err != nil {
			b.logger.WarnContext(work, "cancelling the amqp consumer", "err", err)
		}
	case e := <-connClosed:
		cause = closeError("connection", e)
	case e := <-chClosed:
		cause = closeError("channel", e)
		_ = conn.Close() // ends the deliveries
	case n := <-dispatched:
		// The broker cancelled the consumer (the queue was deleted, say).
		dispatched <- n
		cause = errors.New("the broker cancelled the consumer")
	}
	// Not consuming any more, though the messages in hand may take a while
	// to finish (a Kafka produce up to HandleTimeout).
	b.metrics.Connected.Set(0)
	n := <-dispatched
	s.wait(b.cfg.HandleTimeout + b.cfg.RetryPause + 5*time.Second)
	s.acks.close()
	_ = ch.Close()
	return n > 0, cause
}

// settler settles one session's deliveries and lets the session wait for them.
type settler struct {
	b       *Bridge
	ctx     context.Context // the bridge's: once done, failed messages go back at once
	acks    *acker
	pending sync.WaitGroup
}

// wait waits for every delivery in hand to be settled, at most limit: past it
// the connection closes and the broker redelivers what is left.
func (s *settler) wait(limit time.Duration) {
	done := make(chan struct{})
	go func() {
		s.pending.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(limit):
		s.b.logger.Warn("closing the amqp channel with messages unsettled; the broker redelivers them", "waited", limit)
	}
}

func closeError(what string, e *amqp091.Error) error {
	if e == nil {
		return fmt.Errorf("amqp %s closed", what)
	}
	return fmt.Errorf("amqp %s closed: %w", what, e)
}

// deliver hands d to its category's handler and settles it by the answer. It
// does not wait for the handler.
func (b *Bridge) deliver(work context.Context, s *settler, d amqp091.Delivery) {
	b.metrics.Received.Inc()
	if d.Redelivered {
		b.metrics.Redelivered.Inc()
	}
	category, typ, ok := parseRoutingKey(d.RoutingKey)
	h := b.handlers[category]
	switch {
	case !ok:
		b.settle(s, d, ignoredMalformed)
		return
	case h == nil:
		b.settle(s, d, ignoredUnknown)
		return
	}
	m := Message{RoutingKey: d.RoutingKey, Category: category, Type: typ, Body: d.Body, MessageID: d.MessageId,
		Timestamp: d.Timestamp, Redelivered: d.Redelivered}
	var once sync.Once
	h.Handle(work, m, func(err error) {
		once.Do(func() {
			if u, ok := bridge.AsUnrecoverable(err); ok {
				b.keep(work, m, u, func(err error) { b.finish(s, d, category, err) })
				return
			}
			b.finish(s, d, category, err)
		})
	})
}

// finish settles d by its handler's outcome.
func (b *Bridge) finish(s *settler, d amqp091.Delivery, category string, err error) {
	switch {
	case err == nil:
		b.ack(s, d)
	case errors.Is(err, ErrIgnored):
		b.settle(s, d, category)
	case errors.Is(err, ErrDuplicate):
		b.logger.Debug("duplicate message acknowledged", "routing_key", d.RoutingKey, "message_id", d.MessageId,
			"redelivered", d.Redelivered)
		b.settle(s, d, ignoredDuplicate)
	default:
		b.metrics.Retries.Inc()
		b.logger.Warn("message failed; handing it back for redelivery", "routing_key", d.RoutingKey,
			"pause", b.cfg.RetryPause, "err", err)
		pause := b.cfg.RetryPause
		if s.ctx.Err() != nil {
			pause = 0 // shutting down: the broker redelivers it to whoever is left
		}
		time.AfterFunc(pause, func() {
			s.acks.nack(d.DeliveryTag)
			s.pending.Done()
		})
	}
}

// keep puts an unrecoverable message in the DLQ, counts and reports it, then
// calls done; a failed produce (Kafka down) makes it recoverable.
func (b *Bridge) keep(ctx context.Context, m Message, u *bridge.Unrecoverable, done func(error)) {
	source := "amqp:" + m.RoutingKey
	rec := b.topics.DLQRecord(nil, m.Body, u.Reason, u.Detail, source)
	bridge.ProduceAsync(ctx, b.client, []*kgo.Record{rec}, func(err error) {
		if err != nil {
			done(fmt.Errorf("keeping an unrecoverable message (%s) in the DLQ: %w", u.Reason, err))
			return
		}
		b.metrics.Rejected.WithLabelValues(u.Reason).Inc()
		b.alerter.Report(u.Reason, u.Detail, source)
		b.logger.Info("unrecoverable message kept in the DLQ", "routing_key", m.RoutingKey, "reason", u.Reason, "detail", u.Detail)
		done(nil)
	})
}

// settle acknowledges a message that asks for nothing, counting it under label.
func (b *Bridge) settle(s *settler, d amqp091.Delivery, label string) {
	b.metrics.Ignored.WithLabelValues(label).Inc()
	b.ack(s, d)
}

// ack acknowledges d (with the acker's next batch).
func (b *Bridge) ack(s *settler, d amqp091.Delivery) {
	s.acks.ack(d.DeliveryTag)
	s.pending.Done()
}
