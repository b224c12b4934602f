package escalation

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/internal/metrics"
)

type escalationMetrics struct {
	rounds, escalations *prometheus.CounterVec
	episodes            prometheus.Counter
	statements          prometheus.Gauge
	duration            prometheus.Histogram
}

func newEscalationMetrics(reg prometheus.Registerer) (*escalationMetrics, error) {
	m := &escalationMetrics{
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "escalation_rounds_total",
			Help: "Escalation rounds, by result: ran, skipped (another process held the round lock), error."},
			[]string{"result"}),
		escalations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "escalations_total",
			Help: "Escalation deliveries put in the outbox, by channel: email (once per unread episode), push (per device), digest."},
			[]string{"channel"}),
		episodes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "escalation_episodes_handled_total",
			Help: "Due episodes a round handled, escalated or not (seen meanwhile, access lost, preference off)."}),
		statements: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metrics.Namespace,
			Name: "escalation_round_statements",
			Help: "Statements the last escalation round sent to Postgres (transaction control included): fixed, whatever it handled."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metrics.Namespace,
			Name: "escalation_round_duration_seconds", Help: "How long an escalation round took.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
	}
	if err := metrics.RegisterAll(reg, m.rounds, m.escalations, m.episodes, m.statements, m.duration); err != nil {
		return nil, err
	}
	return m, nil
}
