package stream

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
)

// EventPublisher produces events to the events topic, keyed by sensor id so that one
// sensor's events stay in order on one partition.
type EventPublisher struct {
	client *kgo.Client
	topic  string
}

// NewEventPublisher returns a publisher producing through client to cfg's events
// topic. The client must be an idempotent producer (ClientOpts makes one).
func NewEventPublisher(cfg Config, client *kgo.Client) *EventPublisher {
	return &EventPublisher{client: client, topic: cfg.EventsTopic()}
}

// Publish produces events and returns nil only once the broker acknowledged every one
// of them; on error some may have been produced, which is harmless because event ids
// are deterministic and every consumer of the topic is idempotent on them.
func (p *EventPublisher) Publish(ctx context.Context, events []event.Event) error {
	if len(events) == 0 {
		return nil
	}
	records := make([]*kgo.Record, 0, len(events))
	for _, e := range events {
		value, err := e.Encode()
		if err != nil {
			return fmt.Errorf("publishing events: %w", err)
		}
		records = append(records, &kgo.Record{Topic: p.topic, Key: []byte(e.SensorID), Value: value})
	}
	if err := p.client.ProduceSync(ctx, records...).FirstErr(); err != nil {
		return fmt.Errorf("publishing %d events: %w", len(events), err)
	}
	return nil
}
