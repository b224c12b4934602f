package amqp

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/bridge"
)

// Message is one delivery as a handler sees it. Routing keys have the shape
// events.<category>.update.<type>.
type Message struct {
	RoutingKey string
	Category   string
	Type       string
	Body       []byte
	// MessageID is the publisher's message-id property, if it set one.
	MessageID string
	// Timestamp is the publisher's timestamp property (whole seconds); zero
	// when it set none.
	Timestamp time.Time
	// Redelivered is set when the broker delivered the message before.
	Redelivered bool
}

// Handler handles the messages of one category. Handle starts handling m and
// calls done exactly once, possibly on another goroutine, with the outcome: nil
// once the message's effect is durable (produced to Kafka and acknowledged,
// recorded), and the message is acknowledged to the broker; ErrIgnored when the
// message asks for nothing (acknowledged and counted); an *bridge.Unrecoverable
// when it never can be handled (acknowledged, kept in the DLQ with its reason,
// counted, mailed); any other error is recoverable: the message is handed back
// for redelivery after a pause.
//
// Handle runs on the bridge's one delivery goroutine, in delivery order, so that
// each sensor's readings reach Kafka in the order they came: it must start its
// work and return, never wait on I/O. ctx is not cancelled by shutdown (the
// bridge finishes the messages in hand); the handler bounds its own work.
type Handler interface {
	Handle(ctx context.Context, m Message, done func(error))
}

// ErrIgnored is what a handler returns for a message that asks for nothing of
// it (a sensor event type other than reading: lockstream's own republished
// events among them).
var ErrIgnored = errors.New("nothing to do for this message")

// ErrDuplicate is what a handler returns for a copy of a message it handled
// before (a redelivery, a second publication): acknowledged and counted as
// ignored under "duplicate".
var ErrDuplicate = errors.New("a copy of a message handled before")

// The categories the bridge handles; any other is acknowledged and counted as
// ignored under "unknown".
const (
	CategorySensor       = "sensor"
	CategoryNotification = "notification"
)

// The Ignored label values other than the handled categories.
const (
	ignoredUnknown   = "unknown"   // a category no handler takes
	ignoredMalformed = "malformed" // a routing key not of the shape events.<category>.update.<type>
	ignoredDuplicate = "duplicate" // a copy of a message handled before
)

// TypeReading is the type of events.sensor.update.reading: readings.
const TypeReading = "reading"

// parseRoutingKey splits events.<category>.update.<type>.
func parseRoutingKey(key string) (category, typ string, ok bool) {
	parts := strings.Split(key, ".")
	if len(parts) != 4 || parts[0] != "events" || parts[2] != "update" || parts[1] == "" || parts[3] == "" {
		return "", "", false
	}
	return parts[1], parts[3], true
}

// readingsHandler produces the readings of events.sensor.update.reading to
// Kafka, their bad parts to the DLQ, and ignores the other sensor types.
type readingsHandler struct {
	client  *kgo.Client
	topics  bridge.Topics
	metrics *bridge.Metrics
	alerter *bridge.Alerter
}

func (h *readingsHandler) Handle(ctx context.Context, m Message, done func(error)) {
	if m.Type != TypeReading {
		done(ErrIgnored)
		return
	}
	source := "amqp:" + m.RoutingKey
	p := h.topics.Body(m.Body, source)
	// Produced in delivery order: kgo keeps the order of records per partition.
	bridge.ProduceAsync(ctx, h.client, p.Records(), func(err error) {
		if err != nil {
			done(bridge.Retry(err))
			return
		}
		h.metrics.Produced.Add(float64(len(p.Readings)))
		for _, r := range p.Rejects {
			h.metrics.Rejected.WithLabelValues(r.Reason).Inc()
			h.alerter.Report(r.Reason, r.Detail, source)
		}
		done(nil)
	})
}

// NotificationRecorder records a free-form notification (m.Body of
// events.notification.update.<m.Type>, shaped as POST /v1/notifications takes
// it) into the addressed members' inboxes, once per message: it returns
// ErrDuplicate for a copy of one it recorded before, an *bridge.Unrecoverable
// for a notification that can never be recorded (invalid, unknown member or
// client) and any other error for a failure worth a retry (the store down).
type NotificationRecorder interface {
	RecordNotification(ctx context.Context, m Message) error
}

// ReasonNotificationUnavailable rejects notifications when no recorder is wired
// (a bridge built without a store; lockstream bridge wires InboxRecorder).
const ReasonNotificationUnavailable = "notification_unavailable"

// notificationsHandler records events.notification.update.<type>, each on a
// goroutine of its own (prefetch bounds how many), within timeout.
type notificationsHandler struct {
	recorder NotificationRecorder
	timeout  time.Duration
}

func (h *notificationsHandler) Handle(ctx context.Context, m Message, done func(error)) {
	if h.recorder == nil {
		done(bridge.Reject(ReasonNotificationUnavailable,
			"free-form notifications cannot be recorded: this lockstream has no notification inbox (POST /v1/notifications) to record them in"))
		return
	}
	go func() {
		rctx, cancel := context.WithTimeout(ctx, h.timeout)
		defer cancel()
		done(h.recorder.RecordNotification(rctx, m))
	}()
}
