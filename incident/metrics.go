package incident

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/internal/metrics"
)

type incidentMetrics struct {
	steps, incidents *prometheus.CounterVec
	reminders        prometheus.Counter
	statements       prometheus.Gauge
	duration         prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*incidentMetrics, error) {
	m := &incidentMetrics{
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "incident_steps_total",
			Help: "Incident intake batches and reminder rounds, by step (intake, reminders) and result (ran, error)."},
			[]string{"step", "result"}),
		incidents: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "incidents_total", Help: "Incidents opened and resolved by the intake, and deleted past their retention, by what happened (opened, resolved, purged)."},
			[]string{"what"}),
		reminders: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "incident_reminders_total", Help: "Incident reminders put in members' inboxes."}),
		statements: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metrics.Namespace,
			Name: "incident_round_statements",
			Help: "Statements the last reminder round sent to Postgres (transaction control included): fixed, whatever it handled."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metrics.Namespace,
			Name: "incident_round_duration_seconds", Help: "How long a reminder round took.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
	}
	if err := metrics.RegisterAll(reg, m.steps, m.incidents, m.reminders, m.statements, m.duration); err != nil {
		return nil, err
	}
	return m, nil
}
