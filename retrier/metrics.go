package retrier

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

const metricsNamespace = "lockstream"

// register registers c with reg, or returns the collector already registered
// under the same description, so the Retrier and the Fanout (or two retriers in
// one process) share the metrics they have in common.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		var zero C
		return zero, fmt.Errorf("registering delivery metrics: %w", err)
	}
	return c, nil
}

// newDeliveriesTotal is the one counter of delivery outcomes both the Retrier
// (sent, retry, failed, given_up, superseded) and the Fanout (superseded)
// count into.
func newDeliveriesTotal(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	return register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "deliveries_total",
		Help: "Deliveries that reached an outcome, by channel and outcome (sent, retry, failed, given_up, superseded).",
	}, []string{"channel", "outcome"}))
}

// retrierMetrics are the Retrier's instruments.
type retrierMetrics struct {
	deliveries      *prometheus.CounterVec
	attempts        *prometheus.CounterVec
	latency         *prometheus.HistogramVec
	depth           *prometheus.GaugeVec
	oldestDue       prometheus.Gauge
	requeued        prometheus.Counter
	fenced          prometheus.Counter
	errors          *prometheus.CounterVec
	attemptsDropped prometheus.Counter
}

func newRetrierMetrics(reg prometheus.Registerer) (*retrierMetrics, error) {
	m := &retrierMetrics{}
	var err error
	if m.deliveries, err = newDeliveriesTotal(reg); err != nil {
		return nil, err
	}
	if m.attempts, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "delivery_attempts_total",
		Help: "Delivery attempts made, by channel and error type (none for a sent one).",
	}, []string{"channel", "error_type"})); err != nil {
		return nil, err
	}
	if m.latency, err = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricsNamespace, Name: "delivery_latency_seconds",
		Help: "Time from an event to its delivery being SENT, by channel.",
		// 10ms to about 4.4h: from an instant send to one that took every retry.
		Buckets: prometheus.ExponentialBuckets(0.01, 3, 14),
	}, []string{"channel"})); err != nil {
		return nil, err
	}
	if m.depth, err = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metricsNamespace, Name: "outbox_depth",
		Help: "Deliveries that may still be sent, by state (SCHEDULED, PENDING, RETRY, IN_FLIGHT).",
	}, []string{"state"})); err != nil {
		return nil, err
	}
	if m.oldestDue, err = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metricsNamespace, Name: "outbox_oldest_due_seconds",
		Help: "How long the longest-waiting due delivery has been due; 0 when none is.",
	})); err != nil {
		return nil, err
	}
	if m.requeued, err = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "deliveries_requeued_total",
		Help: "IN_FLIGHT deliveries put back to PENDING because their retrier's lease ran out.",
	})); err != nil {
		return nil, err
	}
	if m.fenced, err = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "delivery_outcomes_fenced_total",
		Help: "Attempt outcomes not recorded because the delivery's lease ran out and it moved on.",
	})); err != nil {
		return nil, err
	}
	if m.errors, err = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "retrier_errors_total",
		Help: "Retrier store operations that failed, by operation (claim, target, finish, requeue, stats, attempts).",
	}, []string{"op"})); err != nil {
		return nil, err
	}
	if m.attemptsDropped, err = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metricsNamespace, Name: "delivery_attempts_dropped_total",
		Help: "Delivery attempts left out of the ClickHouse history because its buffer was full.",
	})); err != nil {
		return nil, err
	}
	return m, nil
}
