package amqp

import "github.com/lockstream/lockstream/internal/settings"

// RegisterSettings declares the AMQP bridge's settings.
func (c *Config) RegisterSettings(s *settings.Set) {
	c.RegisterPublisherSettings(s)
	s.String(&c.Queue, DefaultQueue, settings.Decl{Name: "amqp-queue",
		Doc: "durable queue (quorum when new and supported) the AMQP bridges share, bound to events.*.update.*"})
	s.Int(&c.Prefetch, DefaultPrefetch, settings.Decl{Name: "amqp-prefetch", Doc: "unacknowledged AMQP messages a bridge holds at most"})
	s.Bool(&c.PublishEvents, false, settings.Decl{Name: "amqp-publish-events",
		Doc: "also publish every event of lockstream.events to the exchange as events.sensor.update.<type>, with publisher confirms"})
	s.String(&c.Alert.To, "", settings.Decl{Name: "alert-email",
		Doc: "address mailed (through LOCKSTREAM_SMTP_URL) about unrecoverable AMQP messages, at most once a minute; empty = none"})
}

// RegisterPublisherSettings declares what the publisher of POST /notification
// needs: the broker and the exchange.
func (c *Config) RegisterPublisherSettings(s *settings.Set) {
	s.String(&c.URL, "", settings.Decl{Name: "amqp-url",
		Doc: "AMQP broker (RabbitMQ) of the bridge, e.g. amqp://guest:guest@127.0.0.1:5672/; empty = no AMQP bridge"})
	s.String(&c.Exchange, DefaultExchange, settings.Decl{Name: "amqp-exchange",
		Doc: "durable topic exchange the AMQP bridge binds to and publishes to"})
}
