package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/stream"
)

// DefaultProduceTimeout bounds how long a record may wait for Kafka before its
// produce fails (and the message it came from is delivered again after a pause).
const DefaultProduceTimeout = 30 * time.Second

// NewKafkaClient returns the producer a bridge writes through: lockstream's
// client options (acks from all in-sync replicas, idempotent) and a delivery
// timeout, so that a Kafka outage surfaces as an error after timeout instead of
// holding a message forever. logger may be nil.
func NewKafkaClient(cfg stream.Config, timeout time.Duration, logger *slog.Logger) (*kgo.Client, error) {
	if timeout <= 0 {
		timeout = DefaultProduceTimeout
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts := append(stream.ClientOpts(cfg),
		kgo.RecordDeliveryTimeout(timeout),
		// A record still waiting at the timeout fails even when a request carrying it
		// went unanswered (the broker died): the message it came from is delivered
		// again and may be produced twice, which is harmless; waiting forever is not.
		kgo.AllowIdempotentProduceCancellation(),
		stream.WithLogger(logger),
	)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return client, nil
}

// Produce produces records and returns nil only once Kafka acknowledged every
// one of them. On error some may have been written: a redelivered message then
// produces them again, which the readings' consumers take as repeated readings.
func Produce(ctx context.Context, client *kgo.Client, records []*kgo.Record) error {
	answer := make(chan error, 1)
	ProduceAsync(ctx, client, records, func(err error) { answer <- err })
	return <-answer
}

// ProduceAsync produces records and calls done once Kafka answered for every one
// of them: with nil if it acknowledged them all. done runs on a kgo goroutine and
// must not block.
func ProduceAsync(ctx context.Context, client *kgo.Client, records []*kgo.Record, done func(error)) {
	if len(records) == 0 {
		done(nil)
		return
	}
	if len(records) == 1 {
		client.Produce(ctx, records[0], func(_ *kgo.Record, err error) {
			if err != nil {
				err = fmt.Errorf("producing to kafka: %w", err)
			}
			done(err)
		})
		return
	}
	var (
		mu      sync.Mutex
		pending = len(records)
		errs    []error
	)
	for _, r := range records {
		client.Produce(ctx, r, func(_ *kgo.Record, err error) {
			mu.Lock()
			if err != nil {
				errs = append(errs, err)
			}
			pending--
			last := pending == 0
			mu.Unlock()
			if !last {
				return
			}
			if len(errs) > 0 {
				done(fmt.Errorf("producing to kafka: %d of %d records not acknowledged: %w", len(errs), len(records), errs[0]))
				return
			}
			done(nil)
		})
	}
}

// Fresh returns copies of records fit to be produced again after a failed
// produce (kgo fills in a record's partition, offset and time).
func Fresh(records []*kgo.Record) []*kgo.Record {
	out := make([]*kgo.Record, len(records))
	for i, r := range records {
		out[i] = &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	return out
}
