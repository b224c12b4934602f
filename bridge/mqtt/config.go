package mqtt

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/lockstream/lockstream/stream"
)

// Defaults of Config.
const (
	DefaultTopic         = "lockstream/readings/+"
	DefaultGroup         = "lockstream"
	DefaultSessionExpiry = 24 * time.Hour
	DefaultInflight      = 256
	DefaultKeepAlive     = 30 * time.Second
	DefaultAckInterval   = 5 * time.Millisecond
	DefaultRetryPause    = time.Second
	DefaultReconnectMin  = 100 * time.Millisecond
	DefaultReconnectMax  = 5 * time.Second
	DefaultDrainTimeout  = 30 * time.Second
)

// Config configures the MQTT bridge.
type Config struct {
	// URL is the broker: mqtt://host:port (or tcp://; mqtts:// or tls:// for
	// TLS). Required.
	URL string
	// Topic is the topic filter readings arrive on; the last level of a
	// message's topic is its sensor id. Defaults to DefaultTopic
	// ("lockstream/readings/+").
	Topic string
	// Group is the shared-subscription group: the bridge subscribes to
	// $share/<Group>/<Topic>, so bridges of one group split the messages.
	// Defaults to DefaultGroup ("lockstream").
	Group string
	// ClientID identifies the bridge's session to the broker. It must be stable
	// across restarts (the session, and the messages queued in it while the
	// bridge was away, belong to it) and differ between bridges. Defaults to
	// "lockstream-" and the host name.
	ClientID string
	// SessionExpiry is how long the broker keeps the session, and queues its
	// messages, while the bridge is disconnected. Defaults to
	// DefaultSessionExpiry (24h).
	SessionExpiry time.Duration
	// Inflight is the Receive Maximum the bridge announces: how many QoS 1
	// messages the broker sends without an acknowledgement. It bounds the work
	// in hand. Keep it well below the broker's queue limit (Mosquitto's
	// max_queued_messages, 1000 by default), which counts these messages too
	// while the bridge is away. Defaults to DefaultInflight (256).
	Inflight int
	// KeepAlive is the MQTT keep-alive period. Defaults to DefaultKeepAlive (30s).
	KeepAlive time.Duration
	// AckInterval is how often acknowledgements are sent, in the order the
	// messages came (paho sends the ones whose predecessors are all acknowledged).
	// Defaults to DefaultAckInterval (5ms).
	AckInterval time.Duration
	// RetryPause is the wait before producing a message again after Kafka failed
	// it. Defaults to DefaultRetryPause (1s).
	RetryPause time.Duration
	// ProduceTimeout bounds one produce to Kafka. Defaults to
	// bridge.DefaultProduceTimeout (30s).
	ProduceTimeout time.Duration
	// DrainTimeout bounds how long shutdown waits for the messages in hand.
	// Defaults to DefaultDrainTimeout (30s).
	DrainTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the back-off between connection
	// attempts. Default to DefaultReconnectMin (100ms) and DefaultReconnectMax (5s):
	// a bridge is one of a few clients of its broker, and a longer cap kept it
	// away for up to twice a broker's outage (the attempt after a 13.6 s
	// restart came at about 25 s), past a fleet's heartbeat timeout.
	ReconnectMin, ReconnectMax time.Duration
	// Stream says where Kafka is. Its Brokers are required.
	Stream stream.Config
}

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	c.Topic = cmp.Or(c.Topic, DefaultTopic)
	c.Group = cmp.Or(c.Group, DefaultGroup)
	if c.ClientID == "" {
		host, _ := os.Hostname()
		c.ClientID = "lockstream-" + cmp.Or(host, "bridge")
	}
	c.SessionExpiry = cmp.Or(c.SessionExpiry, DefaultSessionExpiry)
	c.Inflight = cmp.Or(c.Inflight, DefaultInflight)
	c.KeepAlive = cmp.Or(c.KeepAlive, DefaultKeepAlive)
	c.AckInterval = cmp.Or(c.AckInterval, DefaultAckInterval)
	c.RetryPause = cmp.Or(c.RetryPause, DefaultRetryPause)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	c.ReconnectMin = cmp.Or(c.ReconnectMin, DefaultReconnectMin)
	c.ReconnectMax = cmp.Or(c.ReconnectMax, DefaultReconnectMax)
	c.Stream = c.Stream.WithDefaults()
	return c
}

// Validate reports every field of c that cannot work, by name.
func (c Config) Validate() error {
	var errs []error
	if _, err := brokerURL(c.URL); err != nil {
		errs = append(errs, err)
	}
	if c.Topic == "" || strings.HasPrefix(c.Topic, "$share/") {
		errs = append(errs, fmt.Errorf("mqtt bridge: Topic %q: want a topic filter (the bridge adds $share/<Group>/)", c.Topic))
	}
	if c.Group == "" || strings.ContainsAny(c.Group, "/+#") {
		errs = append(errs, fmt.Errorf("mqtt bridge: Group %q: want a name without '/', '+' or '#'", c.Group))
	}
	if c.Inflight < 1 || c.Inflight > 65535 {
		errs = append(errs, fmt.Errorf("mqtt bridge: Inflight %d: want 1 to 65535", c.Inflight))
	}
	if c.SessionExpiry < time.Second || c.SessionExpiry.Seconds() > 0xFFFFFFFE {
		errs = append(errs, fmt.Errorf("mqtt bridge: SessionExpiry %s: want 1s to 136 years", c.SessionExpiry))
	}
	if c.KeepAlive < time.Second || c.KeepAlive.Seconds() > 65535 {
		errs = append(errs, fmt.Errorf("mqtt bridge: KeepAlive %s: want 1s to 65535s", c.KeepAlive))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"AckInterval", c.AckInterval}, {"RetryPause", c.RetryPause}, {"DrainTimeout", c.DrainTimeout},
		{"ReconnectMin", c.ReconnectMin}, {"ReconnectMax", c.ReconnectMax}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("mqtt bridge: %s %s must be positive", d.name, d.v))
		}
	}
	if c.ReconnectMax <= c.ReconnectMin {
		errs = append(errs, fmt.Errorf("mqtt bridge: ReconnectMax %s must exceed ReconnectMin %s", c.ReconnectMax, c.ReconnectMin))
	}
	if err := c.Stream.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("mqtt bridge: Stream: %w", err))
	}
	return errors.Join(errs...)
}

// brokerURL parses and checks URL.
func brokerURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("mqtt bridge: URL %q: want mqtt://host:port", raw)
	}
	switch strings.ToLower(u.Scheme) {
	case "mqtt", "tcp", "mqtts", "tls", "ssl":
		return u, nil
	}
	return nil, fmt.Errorf("mqtt bridge: URL %q: scheme %q, want mqtt, tcp, mqtts or tls", u.Redacted(), u.Scheme)
}
