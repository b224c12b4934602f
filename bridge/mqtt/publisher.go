package mqtt

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Publisher publishes readings to an MQTT broker at QoS 1, the way sensors do, for
// `lockstream simulate --mqtt-url` and the benchmarks: Produce and Flush match
// kgo.Client's, so a simulated fleet can be pointed at it instead of Kafka. A
// record goes to TopicPrefix + its key, with its value as payload.
//
// It keeps up to Connections × the broker's Receive Maximum messages in flight
// (Mosquitto allows 20 per connection by default).
type Publisher struct {
	prefix string
	conns  []*autopaho.ConnectionManager
	queue  chan published
	wg     sync.WaitGroup // the workers
	flight sync.WaitGroup // the records handed to Produce and not yet answered
}

type published struct {
	ctx     context.Context
	rec     *kgo.Record
	promise func(*kgo.Record, error)
}

// NewPublisher connects connections clients (clean sessions) to the broker at
// rawURL and returns once they are all up, or ctx ends.
func NewPublisher(ctx context.Context, rawURL, topicPrefix string, connections int) (*Publisher, error) {
	u, err := brokerURL(rawURL)
	if err != nil {
		return nil, err
	}
	connections = max(connections, 1)
	p := &Publisher{prefix: topicPrefix, queue: make(chan published, 1024)}
	for i := range connections {
		cm, err := autopaho.NewConnection(context.Background(), autopaho.ClientConfig{
			ServerUrls: []*url.URL{u}, KeepAlive: 30, CleanStartOnInitialConnection: true,
			ReconnectBackoff: autopaho.NewConstantBackoff(time.Second), ConnectTimeout: 10 * time.Second,
			AttemptConnection: dial,
			ClientConfig:      paho.ClientConfig{ClientID: fmt.Sprintf("lockstream-pub-%d-%d", time.Now().UnixNano(), i)},
		})
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("mqtt publisher: %w", err)
		}
		p.conns = append(p.conns, cm)
		if err := cm.AwaitConnection(ctx); err != nil {
			p.Close()
			return nil, fmt.Errorf("mqtt publisher: connecting to %s: %w", u.Redacted(), err)
		}
	}
	// Each connection's Publish waits for its PUBACK; enough workers per
	// connection keep its window full.
	for _, cm := range p.conns {
		for range 32 {
			p.wg.Go(func() { p.work(cm) })
		}
	}
	return p, nil
}

func (p *Publisher) work(cm *autopaho.ConnectionManager) {
	for m := range p.queue {
		resp, err := cm.Publish(m.ctx, &paho.Publish{Topic: p.prefix + string(m.rec.Key), QoS: 1, Payload: m.rec.Value})
		switch {
		case err != nil:
			err = fmt.Errorf("mqtt publish to %s%s: %w", p.prefix, m.rec.Key, err)
		case resp != nil && resp.ReasonCode == noMatchingSubscribers:
			// Not an error to paho (below 0x80), but the reading reached no
			// one: no bridge is subscribed (see the package documentation).
			err = fmt.Errorf("mqtt publish to %s%s: the broker had no matching subscriber (PUBACK reason code 0x10)",
				p.prefix, m.rec.Key)
		}
		m.promise(m.rec, err)
		p.flight.Done()
	}
}

// Produce publishes r and calls promise once the broker acknowledged it (or the
// publish failed). It blocks while the publisher's queue is full.
func (p *Publisher) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.flight.Add(1)
	select {
	case p.queue <- published{ctx: ctx, rec: r, promise: promise}:
	case <-ctx.Done():
		promise(r, ctx.Err())
		p.flight.Done()
	}
}

// Flush waits until every record handed to Produce was answered, or ctx ends.
func (p *Publisher) Flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		p.flight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.Join(errors.New("mqtt publisher: flush"), ctx.Err())
	}
}

// Close stops the workers (after what is queued) and disconnects.
func (p *Publisher) Close() {
	if p.queue != nil {
		close(p.queue)
		p.wg.Wait()
		p.queue = nil
	}
	for _, cm := range p.conns {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = cm.Disconnect(ctx)
		cancel()
	}
}

// noMatchingSubscribers is the PUBACK reason code of a message the broker
// delivered to no one (MQTT 5, 3.4.2.1).
const noMatchingSubscribers = 0x10
