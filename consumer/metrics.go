package consumer

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// stateMetrics are the state consumer's metrics of DESIGN.md.
type stateMetrics struct {
	consumed      prometheus.Counter
	rejected      *prometheus.CounterVec
	changed       prometheus.Counter
	unknown       prometheus.Counter
	batchErrors   prometheus.Counter
	lag           *prometheus.GaugeVec
	batchSize     prometheus.Histogram
	batchDuration prometheus.Histogram
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
			Help: "Valid readings of sensors nobody registered: tracked, but they notify nobody.",
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
	for _, reason := range Reasons() {
		m.rejected.WithLabelValues(reason)
	}
	if err := register(reg, m.consumed, m.rejected, m.changed, m.unknown, m.batchErrors, m.lag,
		m.batchSize, m.batchDuration); err != nil {
		return nil, fmt.Errorf("registering consumer metrics: %w", err)
	}
	return m, nil
}

// historyMetrics are the history writer's metrics of DESIGN.md.
type historyMetrics struct {
	rows          *prometheus.CounterVec
	insertSeconds *prometheus.HistogramVec
	failures      prometheus.Counter
	skipped       *prometheus.CounterVec
	buffered      prometheus.Gauge
}

func newHistoryMetrics(reg prometheus.Registerer) (*historyMetrics, error) {
	m := &historyMetrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockstream_history_rows_written_total",
			Help: "Rows inserted into ClickHouse by the history writer, by table.",
		}, []string{"table"}),
		insertSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockstream_history_insert_duration_seconds",
			Help:    "Time of one ClickHouse insert of the history writer, by table.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"table"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_history_flush_failures_total",
			Help: "Failed attempts to flush history to ClickHouse; the flush is retried.",
		}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockstream_history_skipped_total",
			Help: "Records the history writer does not store: invalid readings (in the DLQ) and undecodable events.",
		}, []string{"topic"}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lockstream_history_buffered_records",
			Help: "Records polled by the history writer and not yet stored (bounded by the flush size).",
		}),
	}
	for _, table := range []string{"readings", "events"} {
		m.rows.WithLabelValues(table)
	}
	if err := register(reg, m.rows, m.insertSeconds, m.failures, m.skipped, m.buffered); err != nil {
		return nil, fmt.Errorf("registering history metrics: %w", err)
	}
	return m, nil
}

func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, reg.Register(c))
	}
	return errors.Join(errs...)
}

func partitionLabel(p int32) string {
	return strconv.FormatInt(int64(p), 10)
}
