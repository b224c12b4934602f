// Package metrics is the one place Prometheus collectors are registered from:
// every daemon registers on the process registry through it, so two daemons in
// one process (`lockstream all`) that share a metric share its collector instead
// of failing.
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every lockstream metric.
const Namespace = "lockstream"

// Register registers c with reg, or returns the collector already registered
// under the same description when it has c's type.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		var zero C
		return zero, fmt.Errorf("registering metrics: %w", err)
	}
	return c, nil
}

// RegisterAll registers every collector with reg and joins the errors. Unlike
// Register it does not share collectors: it is for metrics that only one
// component of a process owns.
func RegisterAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	var errs []error
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			errs = append(errs, fmt.Errorf("registering metrics: %w", err))
		}
	}
	return errors.Join(errs...)
}

// NewDeliveriesTotal is the one counter of delivery outcomes that both the
// retrier (sent, retry, failed, given_up, superseded) and the fan-out
// (superseded) count into.
func NewDeliveriesTotal(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	return Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "deliveries_total",
		Help: "Deliveries that reached an outcome, by channel and outcome (sent, retry, failed, given_up, superseded).",
	}, []string{"channel", "outcome"}))
}
