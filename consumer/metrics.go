package consumer

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/internal/metrics"
	"github.com/lockstream/lockstream/reading"
)

// stateMetrics are the state consumer's metrics of DESIGN.md.
type stateMetrics struct {
	consumed prometheus.Counter
	rejected *prometheus.CounterVec
	changed  prometheus.Counter
	unknown  prometheus.Counter
	// unstable and held are the flapping judgement's: sensor_unstable events
	// produced, and changes held (history only) within an unstable streak.
	unstable prometheus.Counter
	held     prometheus.Counter
	// unregisteredFlushErrors counts failed stores of the unregistered summary.
	unregisteredFlushErrors prometheus.Counter
	batchErrors             prometheus.Counter
	lag                     *prometheus.GaugeVec
	batchSize               prometheus.Histogram
	batchDuration           prometheus.Histogram
}

func newStateMetrics(reg prometheus.Registerer) (*stateMetrics, error) {
	m := &stateMetrics{
		consumed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_readings_consumed_total",
			Help: "Records taken from the readings topic by the state consumer, valid or not.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockstream_readings_rejected_total",
			Help: "Readings sent to the DLQ, by reason.",
		}, []string{"reason"}),
		changed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_readings_changed_total",
			Help: "Readings that changed their sensor's state (state_changed events produced).",
		}),
		unknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_readings_unknown_sensor_total",
			Help: "Valid readings of sensors nobody registered: stored in history only (no state, no heartbeat, no events).",
		}),
		unstable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_readings_unstable_total",
			Help: "sensor_unstable events produced: sensors judged flapping (a batch replayed after a crash counts again).",
		}),
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_readings_held_total",
			Help: "State changes of unstable sensors held by the flapping judgement: in history, notified to nobody.",
		}),
		unregisteredFlushErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_consumer_unregistered_flush_failures_total",
			Help: "Failed stores of the summary of unregistered sensor ids; retried at the next flush.",
		}),
		batchErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_consumer_batch_failures_total",
			Help: "Failed attempts at a batch's effects; the batch is retried.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lockstream_consumer_lag",
			Help: "Records of the readings topic not yet fetched by the state consumer, per partition.",
		}, []string{"partition"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lockstream_consumer_batch_size",
			Help:    "Records per batch a partition worker processes.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9), // 1 to 65,536
		}),
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lockstream_consumer_batch_duration_seconds",
			Help:    "Time to apply one batch: validate, compare, produce, store.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1 ms to 8 s
		}),
	}
	for _, reason := range reading.Reasons() {
		m.rejected.WithLabelValues(reason)
	}
	if err := metrics.RegisterAll(reg, m.consumed, m.rejected, m.changed, m.unknown, m.unstable, m.held, m.unregisteredFlushErrors, m.batchErrors, m.lag,
		m.batchSize, m.batchDuration); err != nil {
		return nil, fmt.Errorf("registering consumer metrics: %w", err)
	}
	return m, nil
}

func partitionLabel(p int32) string {
	return strconv.FormatInt(int64(p), 10)
}
