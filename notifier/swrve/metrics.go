package swrve

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	lsmetrics "github.com/lockstream/lockstream/internal/metrics"
)

// metrics are a Sender's instruments, all named lockstream_swrve_*.
type metrics struct {
	inFlight     prometheus.Gauge
	waiting      prometheus.Gauge
	poolSize     prometheus.Gauge
	responseTime prometheus.Histogram
	sends        *prometheus.CounterVec
	responses    *prometheus.CounterVec
	rateErrors   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "lockstream", "swrve"
	m := &metrics{
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "in_flight_sends",
			Help: "Requests to Swrve in flight now.",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "waiting_sends",
			Help: "Sends waiting for a free slot in the pool or their turn under the rate.",
		}),
		poolSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "pool_size",
			Help: "How many requests to Swrve may be in flight at once (rate × expected latency).",
		}),
		responseTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "response_seconds",
			Help: "Time from sending a request to Swrve to its answer (or error).",
			// Swrve's measured answers run from about 0.1 s to 7.7 s.
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 15},
		}),
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "sends_total",
			Help: "Push attempts by outcome (sent, retry, failed) and error type (empty for sent).",
		}, []string{"outcome", "error_type"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "responses_total",
			Help: "Answers from Swrve by HTTP status code: a rising 429 means the rate is set above what Swrve accepts.",
		}, []string{"code"}),
		rateErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "rate_errors_total",
			Help: "Failed calls to Redis for the shared Swrve rate: sends wait while it cannot be read.",
		}),
	}
	// The codes alerts watch exist from the start, so rate() sees their first one.
	for _, code := range []string{"200", "429"} {
		m.responses.WithLabelValues(code)
	}
	if err := lsmetrics.RegisterAll(reg, m.inFlight, m.waiting, m.poolSize, m.responseTime, m.sends, m.responses, m.rateErrors); err != nil {
		return nil, fmt.Errorf("registering Swrve metrics (one Sender per process): %w", err)
	}
	return m, nil
}
