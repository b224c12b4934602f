package amqp

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// dialTimeout bounds connecting to the broker, TCP and AMQP handshake.
const dialTimeout = 10 * time.Second

// heartbeat is the AMQP heartbeat interval: a dead broker or network is noticed
// within about twice this.
const heartbeat = 10 * time.Second

// dial opens a connection named name (the broker lists it under that name).
func dial(rawURL, name string) (*amqp091.Connection, error) {
	conn, err := amqp091.DialConfig(rawURL, amqp091.Config{
		Heartbeat:  heartbeat,
		Locale:     "en_US",
		Dial:       amqp091.DefaultDial(dialTimeout),
		Properties: amqp091.Table{"connection_name": name, "product": "lockstream"},
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", redact(rawURL), err)
	}
	return conn, nil
}

// errTopology marks a declaration the broker refused because what exists differs
// (an exchange of another type, say): reconnecting cannot fix that.
var errTopology = errors.New("the broker refused the declaration")

// declare declares the exchange, the queue (a quorum queue when the broker has
// them and the queue is new) and the binding, idempotently: it runs on every
// connection. It returns the queue's type as declared, or "existing".
func declare(conn *amqp091.Connection, cfg Config) (string, error) {
	ch, err := conn.Channel()
	if err != nil {
		return "", fmt.Errorf("opening a channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if err := ch.ExchangeDeclare(cfg.Exchange, "topic", true, false, false, false, nil); err != nil {
		return "", declareError("exchange "+cfg.Exchange, err)
	}
	queueType := "existing"
	exists, err := queueExists(conn, cfg.Queue)
	if err != nil {
		return "", err
	}
	if !exists {
		queueType = "classic"
		args := amqp091.Table{}
		if supportsQuorum(conn) {
			queueType = "quorum"
			args["x-queue-type"] = "quorum"
		}
		// Another bridge may declare it at the same moment: with the same
		// arguments both succeed.
		if _, err := ch.QueueDeclare(cfg.Queue, true, false, false, false, args); err != nil {
			return "", declareError("queue "+cfg.Queue, err)
		}
	}
	if err := ch.QueueBind(cfg.Queue, cfg.Binding, cfg.Exchange, false, nil); err != nil {
		return "", declareError("binding of "+cfg.Queue, err)
	}
	return queueType, nil
}

// queueExists asks with a passive declaration, on a channel of its own because a
// missing queue closes the channel it is asked on.
func queueExists(conn *amqp091.Connection, name string) (bool, error) {
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("opening a channel: %w", err)
	}
	_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err == nil {
		_ = ch.Close()
		return true, nil
	}
	var amqpErr *amqp091.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp091.NotFound {
		return false, nil
	}
	return false, fmt.Errorf("looking up queue %s: %w", name, err)
}

// declareError marks refusals (PRECONDITION_FAILED, ACCESS_REFUSED) as errTopology.
func declareError(what string, err error) error {
	var amqpErr *amqp091.Error
	if errors.As(err, &amqpErr) && (amqpErr.Code == amqp091.PreconditionFailed || amqpErr.Code == amqp091.AccessRefused) {
		return fmt.Errorf("declaring %s: %w: %w", what, errTopology, err)
	}
	return fmt.Errorf("declaring %s: %w", what, err)
}

// supportsQuorum reports whether the broker is RabbitMQ 3.8 or later, the first
// with quorum queues.
func supportsQuorum(conn *amqp091.Connection) bool {
	product, _ := conn.Properties["product"].(string)
	version, _ := conn.Properties["version"].(string)
	if !strings.EqualFold(product, "RabbitMQ") {
		return false
	}
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major > 3 || major == 3 && minor >= 8
}
