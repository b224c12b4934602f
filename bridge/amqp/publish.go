package amqp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/bridge"
	"github.com/lockstream/lockstream/internal/metrics"
	"github.com/lockstream/lockstream/stream"
)

// publishBatch bounds the events one republishing round takes from Kafka and
// waits confirms for.
const publishBatch = 1000

// publishTimeout bounds waiting for the confirms of one batch.
const publishTimeout = 30 * time.Second

// routingWord matches an event or notification type fit for a routing key word.
var routingWord = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// outgoing is one message to publish.
type outgoing struct {
	key string
	msg amqp091.Publishing
}

// confirmPublisher publishes on a channel in confirm mode, connecting on first
// use and again after any failure. It is safe for concurrent use (calls take
// turns).
type confirmPublisher struct {
	url, name, exchange string

	mu   sync.Mutex
	conn *amqp091.Connection
	ch   *amqp091.Channel
}

// publish publishes msgs and returns nil only once the broker confirmed every
// one. On error the connection is dropped, so the next call starts afresh.
func (p *confirmPublisher) publish(ctx context.Context, msgs []outgoing) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.connect(); err != nil {
		return err
	}
	confirms := make([]*amqp091.DeferredConfirmation, 0, len(msgs))
	for _, m := range msgs {
		c, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, m.key, false, false, m.msg)
		if err != nil {
			p.drop()
			return fmt.Errorf("publishing to %s: %w", p.exchange, err)
		}
		confirms = append(confirms, c)
	}
	for i, c := range confirms {
		acked, err := c.WaitContext(ctx)
		if err != nil {
			p.drop()
			return fmt.Errorf("waiting for the confirm of %s: %w", msgs[i].key, err)
		}
		if !acked {
			p.drop()
			return fmt.Errorf("the broker refused %s (nack)", msgs[i].key)
		}
	}
	return nil
}

// connect opens the connection and confirm-mode channel unless they are open,
// declaring the exchange.
func (p *confirmPublisher) connect() error {
	if p.ch != nil && !p.ch.IsClosed() {
		return nil
	}
	p.drop()
	conn, err := dial(p.url, p.name)
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.ExchangeDeclare(p.exchange, "topic", true, false, false, false, nil)
	}
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("setting up a confirm channel: %w", err)
	}
	p.conn, p.ch = conn, ch
	return nil
}

// drop closes the connection, if any.
func (p *confirmPublisher) drop() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
	p.conn, p.ch = nil, nil
}

// close releases the connection.
func (p *confirmPublisher) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop()
}

// publishMetrics counts the republishing of events.
type publishMetrics struct {
	published prometheus.Counter
	skipped   prometheus.Counter
	failures  prometheus.Counter
}

func newPublishMetrics(reg prometheus.Registerer) (*publishMetrics, error) {
	m := &publishMetrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "lockstream", Subsystem: "amqp", Name: "events_published_total",
			Help: "Events of lockstream.events republished to the exchange and confirmed by the broker."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "lockstream", Subsystem: "amqp", Name: "events_skipped_total",
			Help: "Records of lockstream.events not republished: no event type fit for a routing key."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "lockstream", Subsystem: "amqp", Name: "publish_failures_total",
			Help: "Failed republishing rounds; each is retried until confirmed."}),
	}
	if err := metrics.RegisterAll(reg, m.published, m.skipped, m.failures); err != nil {
		return nil, fmt.Errorf("amqp republishing: %w", err)
	}
	return m, nil
}

// newRepublisher returns the consumer group that republishes lockstream.events
// (its own group, EventsGroup) and the publisher it publishes through.
func newRepublisher(b *Bridge, reg prometheus.Registerer) (*stream.Group, error) {
	b.pub = &confirmPublisher{url: b.cfg.URL, name: b.cfg.ConnectionName + " (events)", exchange: b.cfg.Exchange}
	g, err := stream.NewGroup(stream.GroupConfig{Stream: b.cfg.Stream, Group: b.cfg.EventsGroup,
		Topics: []string{b.cfg.Stream.EventsTopic()}, MaxPollRecords: publishBatch, DrainTimeout: publishTimeout,
		ClientName: "amqp-events"}, republisher{b}, reg, b.logger)
	if err != nil {
		return nil, fmt.Errorf("amqp republish: %w", err)
	}
	return g, nil
}

// republish consumes lockstream.events through the Group and publishes each
// event to the exchange as events.sensor.update.<type>. A batch is marked for
// commit only once the broker confirmed all of it, and a partition's batches are
// published in order: at least once, in order per sensor. A group without
// committed offsets starts at the topic's beginning.
func (b *Bridge) republish(ctx context.Context) error {
	defer b.pub.close()
	b.logger.InfoContext(ctx, "republishing events to amqp", "topic", b.cfg.Stream.EventsTopic(),
		"exchange", b.cfg.Exchange, "group", b.cfg.EventsGroup)
	if err := b.events.Run(ctx); err != nil {
		return fmt.Errorf("amqp republish: %w", err)
	}
	return nil
}

// republisher publishes each assigned partition's batches (stream.Handler and
// stream.PartitionHandler). The partitions share one confirm channel; their
// publishes take turns.
type republisher struct{ b *Bridge }

// Assigned returns the handler of a partition: the republisher itself.
func (r republisher) Assigned(*kgo.Client, string, int32) stream.PartitionHandler { return r }

// Handle publishes the batch's events and returns once the broker confirmed them
// all, retrying until then; it fails only when ctx ends (the partition revoked or
// lost, or the bridge stopping), and the batch is then not marked.
func (r republisher) Handle(ctx context.Context, batch stream.Batch) (stream.Pending, error) {
	if !r.b.publishEvents(ctx, r.b.pub, batch.Records) {
		return nil, fmt.Errorf("republishing %d events: %w", len(batch.Records), ctx.Err())
	}
	return nil, nil
}

// Close does nothing: what was not confirmed is not marked.
func (republisher) Close() {}

// publishEvents publishes one batch until the broker confirmed it all; it
// reports false if ctx ended first.
func (b *Bridge) publishEvents(ctx context.Context, pub *confirmPublisher, records []*kgo.Record) bool {
	msgs := make([]outgoing, 0, len(records))
	for _, r := range records {
		var head struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		}
		if err := json.Unmarshal(r.Value, &head); err != nil || !routingWord.MatchString(head.Type) {
			b.pubm.skipped.Inc()
			b.logger.WarnContext(ctx, "not republishing an event without a usable type", "partition", r.Partition, "offset", r.Offset)
			continue
		}
		msgs = append(msgs, outgoing{key: "events.sensor.update." + head.Type, msg: amqp091.Publishing{
			ContentType: "application/json", DeliveryMode: amqp091.Persistent, MessageId: head.ID,
			Timestamp: r.Timestamp, AppId: "lockstream", Body: r.Value,
			Headers: amqp091.Table{"sensor_id": string(r.Key)},
		}})
	}
	if len(msgs) == 0 {
		return true
	}
	backoff := bridge.Backoff{Min: b.cfg.ReconnectMin, Max: b.cfg.ReconnectMax}
	for {
		pctx, cancel := context.WithTimeout(ctx, publishTimeout)
		err := pub.publish(pctx, msgs)
		cancel()
		if err == nil {
			b.pubm.published.Add(float64(len(msgs)))
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		b.pubm.failures.Inc()
		b.logger.WarnContext(ctx, "republishing events failed; retrying", "events", len(msgs), "err", err)
		if !backoff.Wait(ctx) {
			return false
		}
	}
}

// NotificationPublisher publishes free-form notifications to the exchange as
// events.notification.update.<type>, with publisher confirms, for
// POST /notification (webapi.NotificationPublisher). It is safe for concurrent
// use; Close releases its connection.
type NotificationPublisher struct {
	pub *confirmPublisher
}

// NewNotificationPublisher returns a publisher to cfg's exchange; it connects on
// first use.
func NewNotificationPublisher(cfg Config) (*NotificationPublisher, error) {
	cfg = cfg.WithDefaults()
	if cfg.URL == "" {
		return nil, errors.New("amqp notification publisher: URL is required")
	}
	return &NotificationPublisher{pub: &confirmPublisher{url: cfg.URL, name: cfg.ConnectionName + " (notifications)",
		exchange: cfg.Exchange}}, nil
}

// PublishNotification publishes body with routing key
// events.notification.update.<typ> and returns nil once the broker confirmed it.
// Each call is a notification of its own: it carries a new message-id, so two
// calls with the same body in one second are not taken for copies (the bridge
// records once per message-id).
func (p *NotificationPublisher) PublishNotification(ctx context.Context, typ string, body []byte) error {
	if !routingWord.MatchString(typ) {
		return fmt.Errorf("notification type %q: want 1 to 64 letters, digits, '_' or '-'", typ)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("a message-id for a notification: %w", err)
	}
	return p.pub.publish(ctx, []outgoing{{key: "events.notification.update." + typ, msg: amqp091.Publishing{
		ContentType: "application/json", DeliveryMode: amqp091.Persistent, Timestamp: time.Now(),
		MessageId: id.String(), AppId: "lockstream", Body: body,
	}}})
}

// Close releases the publisher's connection.
func (p *NotificationPublisher) Close() { p.pub.close() }
