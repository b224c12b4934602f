package retrier

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/storage"
)

// attemptWriter batches attempts into ClickHouse off the delivery path: add never
// blocks, and a slow or absent ClickHouse costs history rows (counted), never
// deliveries.
type attemptWriter struct {
	store    AttemptStore
	in       chan storage.DeliveryAttempt
	done     chan struct{}
	interval time.Duration
	batch    int
	buffer   int
	timeout  time.Duration
	dropped  prometheus.Counter
	errors   prometheus.Counter
	logger   *slog.Logger
}

func newAttemptWriter(cfg Config, store AttemptStore, m *retrierMetrics, logger *slog.Logger) *attemptWriter {
	return &attemptWriter{
		store:    store,
		in:       make(chan storage.DeliveryAttempt, cfg.AttemptBatchSize),
		done:     make(chan struct{}),
		interval: cfg.AttemptFlushInterval,
		batch:    cfg.AttemptBatchSize,
		buffer:   cfg.AttemptBuffer,
		timeout:  cfg.WriteTimeout,
		dropped:  m.attemptsDropped,
		errors:   m.errors.WithLabelValues("attempts"),
		logger:   logger,
	}
}

// add queues an attempt, or drops it when the writer is that far behind.
func (w *attemptWriter) add(a storage.DeliveryAttempt) {
	select {
	case w.in <- a:
	default:
		w.dropped.Inc()
	}
}

// close stops intake and waits for the final write.
func (w *attemptWriter) close() {
	close(w.in)
	<-w.done
}

// run writes batches until close, then writes what is left. Writes run on
// ctx without its cancellation, each bounded by the write timeout, so the last
// attempts before a shutdown still reach the history.
func (w *attemptWriter) run(ctx context.Context) {
	defer close(w.done)
	ctx = context.WithoutCancel(ctx)
	ticker := time.NewTicker(w.interval)
	defer ticker.Stop()
	var pending []storage.DeliveryAttempt
	for {
		select {
		case a, ok := <-w.in:
			if !ok {
				if left := w.flush(ctx, pending); len(left) > 0 {
					w.dropped.Add(float64(len(left)))
					w.logger.ErrorContext(ctx, "delivery attempts lost from the history at shutdown", "attempts", len(left))
				}
				return
			}
			pending = w.keep(pending, a)
			if len(pending) >= w.batch {
				pending = w.flush(ctx, pending)
			}
		case <-ticker.C:
			pending = w.flush(ctx, pending)
		}
	}
}

// keep appends a to pending, dropping it if the buffer is full.
func (w *attemptWriter) keep(pending []storage.DeliveryAttempt, a storage.DeliveryAttempt) []storage.DeliveryAttempt {
	if len(pending) >= w.buffer {
		w.dropped.Inc()
		return pending
	}
	return append(pending, a)
}

// flush writes pending and returns what is left to write: nothing on success,
// pending itself on failure, to try again at the next flush.
func (w *attemptWriter) flush(ctx context.Context, pending []storage.DeliveryAttempt) []storage.DeliveryAttempt {
	if len(pending) == 0 {
		return pending
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	if err := w.store.InsertDeliveryAttempts(ctx, pending); err != nil {
		w.errors.Inc()
		w.logger.ErrorContext(ctx, "writing delivery attempts to ClickHouse failed",
			"attempts", len(pending), "err", err)
		return pending
	}
	return pending[:0]
}
