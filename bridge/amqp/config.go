package amqp

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/lockstream/lockstream/bridge"
	"github.com/lockstream/lockstream/stream"
)

// Defaults of Config.
const (
	DefaultExchange       = "lockstream"
	DefaultQueue          = "lockstream.events-recorder"
	DefaultBinding        = "events.*.update.*"
	DefaultPrefetch       = 1000
	DefaultRetryPause     = time.Second
	DefaultHandleTimeout  = 30 * time.Second
	DefaultEventsGroup    = "lockstream-amqp-events"
	DefaultConnectionName = "lockstream bridge"
	DefaultReconnectMin   = 100 * time.Millisecond
	DefaultReconnectMax   = 5 * time.Second
)

// Config configures the AMQP bridge.
type Config struct {
	// URL is the broker's AMQP URL, amqp://user:password@host:port/vhost.
	// Required.
	URL string
	// Exchange is the durable topic exchange the bridge declares, binds its queue
	// to and republishes events to. Defaults to DefaultExchange ("lockstream").
	Exchange string
	// Queue is the durable queue the bridge declares and consumes; bridges that
	// share it split the load. It is a quorum queue when the broker supports them
	// (RabbitMQ 3.8 and later) and the queue does not exist yet; an existing queue
	// is used as it is. Defaults to DefaultQueue ("lockstream.events-recorder").
	Queue string
	// Binding is the routing-key pattern that binds Queue to Exchange. Defaults
	// to DefaultBinding ("events.*.update.*").
	Binding string
	// Prefetch is how many unacknowledged messages the broker hands the bridge at
	// most (basic.qos); as many are handled at once. Defaults to DefaultPrefetch
	// (1000).
	Prefetch int
	// RetryPause is the wait before a message that failed recoverably (Kafka or a
	// store down) is handed back to the broker for redelivery, so that a broken
	// dependency is not hammered. Defaults to DefaultRetryPause (1s).
	RetryPause time.Duration
	// HandleTimeout bounds handling one message, its produce to Kafka included;
	// past it the message is redelivered. Defaults to DefaultHandleTimeout (30s).
	HandleTimeout time.Duration
	// PublishEvents turns on republishing every event of lockstream.events to
	// Exchange with routing key events.sensor.update.<type>, with publisher
	// confirms. Defaults to false.
	PublishEvents bool
	// EventsGroup is the Kafka consumer group of the republishing. Defaults to
	// DefaultEventsGroup ("lockstream-amqp-events").
	EventsGroup string
	// ConnectionName names the bridge's connections in the broker's connection
	// list (the connection_name client property). Defaults to
	// DefaultConnectionName ("lockstream bridge").
	ConnectionName string
	// ReconnectMin and ReconnectMax bound the back-off between connection
	// attempts. Default to DefaultReconnectMin (100ms) and DefaultReconnectMax (5s):
	// a bridge is one of a few clients of its broker, and a longer cap kept it
	// away for up to twice a broker's outage (the attempt after a 13.6 s
	// restart came at about 25 s), past a fleet's heartbeat timeout.
	ReconnectMin, ReconnectMax time.Duration
	// Stream says where Kafka is. Its Brokers are required.
	Stream stream.Config
	// Alert configures the email about unrecoverable messages; its To empty (the
	// default) means none.
	Alert bridge.AlertConfig
}

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	c.Exchange = cmp.Or(c.Exchange, DefaultExchange)
	c.Queue = cmp.Or(c.Queue, DefaultQueue)
	c.Binding = cmp.Or(c.Binding, DefaultBinding)
	c.Prefetch = cmp.Or(c.Prefetch, DefaultPrefetch)
	c.RetryPause = cmp.Or(c.RetryPause, DefaultRetryPause)
	c.HandleTimeout = cmp.Or(c.HandleTimeout, DefaultHandleTimeout)
	c.EventsGroup = cmp.Or(c.EventsGroup, DefaultEventsGroup)
	c.ConnectionName = cmp.Or(c.ConnectionName, DefaultConnectionName)
	c.ReconnectMin = cmp.Or(c.ReconnectMin, DefaultReconnectMin)
	c.ReconnectMax = cmp.Or(c.ReconnectMax, DefaultReconnectMax)
	c.Stream = c.Stream.WithDefaults()
	c.Alert.Bridge = "amqp"
	return c
}

// Validate reports every field of c that cannot work, by name.
func (c Config) Validate() error {
	var errs []error
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
		errs = append(errs, fmt.Errorf("amqp bridge: URL %q: want amqp://user:password@host:port/", redact(c.URL)))
	}
	if c.Prefetch < 1 || c.Prefetch > 65535 {
		errs = append(errs, fmt.Errorf("amqp bridge: Prefetch %d: want 1 to 65535", c.Prefetch))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"RetryPause", c.RetryPause}, {"HandleTimeout", c.HandleTimeout}, {"ReconnectMin", c.ReconnectMin}, {"ReconnectMax", c.ReconnectMax}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("amqp bridge: %s %s must be positive", d.name, d.v))
		}
	}
	if err := c.Stream.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("amqp bridge: Stream: %w", err))
	}
	return errors.Join(errs...)
}

// redact hides a URL's password, for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
