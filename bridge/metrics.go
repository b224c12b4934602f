package bridge

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/internal/metrics"
)

// Metrics counts what one bridge does. Every name starts with
// lockstream_<bridge>_ (lockstream_amqp_…, lockstream_mqtt_…).
type Metrics struct {
	// Received counts messages taken from the broker, redeliveries included.
	Received prometheus.Counter
	// Produced counts readings produced to the readings topic and acknowledged.
	Produced prometheus.Counter
	// Rejected counts bad messages (or bad readings of an array) kept in the DLQ,
	// by reason.
	Rejected *prometheus.CounterVec
	// Redelivered counts messages the broker delivered again (AMQP's redelivered
	// flag, MQTT's DUP flag).
	Redelivered prometheus.Counter
	// Retries counts recoverable failures: messages left for redelivery.
	Retries prometheus.Counter
	// Ignored counts messages acknowledged without effect, by category.
	Ignored *prometheus.CounterVec
	// Connected is 1 while the bridge is connected to its broker and consuming
	// (AMQP) or subscribed (MQTT).
	Connected prometheus.Gauge
}

// NewMetrics registers bridge's metrics with reg; reasons are the rejection
// reasons to start at zero.
func NewMetrics(reg prometheus.Registerer, bridge string, reasons []string) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("bridge metrics: the Registerer is nil")
	}
	ns := metrics.Namespace
	sub := bridge
	m := &Metrics{
		Received: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "received_total",
			Help: "Messages taken from the broker, redeliveries included."}),
		Produced: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "produced_total",
			Help: "Readings produced to the readings topic and acknowledged by Kafka."}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rejected_total",
			Help: "Bad messages, or bad readings of an array, kept in the DLQ, by reason."}, []string{"reason"}),
		Redelivered: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "redelivered_total",
			Help: "Messages the broker delivered again (AMQP redelivered flag, MQTT DUP flag)."}),
		Retries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "retries_total",
			Help: "Recoverable failures (Kafka or a store unavailable): messages left unacknowledged for redelivery."}),
		Ignored: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "ignored_total",
			Help: "Messages acknowledged without effect, by category."}, []string{"category"}),
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "connected",
			Help: "1 while the bridge is connected to its broker, else 0."}),
	}
	if err := metrics.RegisterAll(reg, m.Received, m.Produced, m.Rejected, m.Redelivered, m.Retries, m.Ignored, m.Connected); err != nil {
		return nil, fmt.Errorf("%s bridge: %w", bridge, err)
	}
	for _, r := range reasons {
		m.Rejected.WithLabelValues(r)
	}
	return m, nil
}
