package heartbeat

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

const metricsNamespace = "lockstream"
const metricsSubsystem = "heartbeat"

// register registers c with reg, or returns the collector already registered under
// the same description, so that two Trackers (say, the consumer's and the API's in
// `lockstream all`) share their metrics instead of failing.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		var zero C
		return zero, fmt.Errorf("registering heartbeat metrics: %w", err)
	}
	return c, nil
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
