package heartbeat

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/internal/metrics"
)

const metricsNamespace = "lockstream"
const metricsSubsystem = "heartbeat"

// register is metrics.Register: two Trackers (say, the consumer's and the
// API's in `lockstream all`) share their metrics instead of failing.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	return metrics.Register(reg, c)
}

func newCounter(reg prometheus.Registerer, name, help string) (prometheus.Counter, error) {
	return register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: name, Help: help,
	}))
}

func newGauge(reg prometheus.Registerer, name, help string) (prometheus.Gauge, error) {
	return register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: name, Help: help,
	}))
}
