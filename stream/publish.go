package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadingPublisher produces readings to the readings topic, for the ingest API
// (webapi.ReadingPublisher). It is safe for concurrent use.
type ReadingPublisher struct {
	client *kgo.Client
	topic  string
}

// NewReadingPublisher returns a publisher producing through client to cfg's
// readings topic. The client is the caller's to close.
func NewReadingPublisher(cfg Config, client *kgo.Client) *ReadingPublisher {
	return &ReadingPublisher{client: client, topic: cfg.ReadingsTopic()}
}

// PublishReadings produces values[i] keyed by keys[i] and returns nil only once
// the broker acknowledged every one. On error some may have been written; the
// error says how many failed.
func (p *ReadingPublisher) PublishReadings(ctx context.Context, keys, values [][]byte) error {
	if len(keys) != len(values) {
		return fmt.Errorf("publishing readings: %d keys for %d values", len(keys), len(values))
	}
	if len(values) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, len(values))
	for i := range values {
		recs[i] = &kgo.Record{Topic: p.topic, Key: keys[i], Value: values[i]}
	}
	var (
		failed int
		errs   []error
	)
	for _, res := range p.client.ProduceSync(ctx, recs...) {
		if res.Err != nil {
			failed++
			if len(errs) == 0 {
				errs = append(errs, res.Err)
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("publishing readings: %d of %d not acknowledged: %w", failed, len(recs), errors.Join(errs...))
	}
	return nil
}
