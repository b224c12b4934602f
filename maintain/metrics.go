package maintain

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/internal/metrics"
)

type maintainMetrics struct {
	created, dropped, historyDropped *prometheus.CounterVec
	kept                             prometheus.Gauge
	defaultRows                      *prometheus.GaugeVec
	errors, keysDeleted              prometheus.Counter
	reports, reportErrors            prometheus.Counter
	rollupCorrections                prometheus.Counter
}

func newMaintainMetrics(reg prometheus.Registerer) (*maintainMetrics, error) {
	m := &maintainMetrics{
		created: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "maintain_partitions_created_total", Help: "Month partitions made ahead, by table."}, []string{"table"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "maintain_partitions_dropped_total", Help: "Postgres month partitions dropped past the retention, by table."}, []string{"table"}),
		historyDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "maintain_history_partitions_dropped_total", Help: "ClickHouse month partitions dropped past the history retention, by table."}, []string{"table"}),
		kept: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metrics.Namespace,
			Name: "maintain_partitions_kept_open", Help: "Partitions past the retention kept at the last pass because their month holds open deliveries."}),
		defaultRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metrics.Namespace,
			Name: "maintain_default_partition_rows", Help: "Rows in a table's DEFAULT partition (times outside every month partition; never dropped)."}, []string{"table"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "maintain_errors_total", Help: "Maintenance passes that failed in part."}),
		keysDeleted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "maintain_notification_keys_deleted_total", Help: "Notification idempotency keys deleted past the retention."}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "maintain_weekly_reports_total", Help: "Weekly reports put into the outbox (one per client and week, across maintainers)."}),
		reportErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "maintain_weekly_report_errors_total", Help: "Weekly report rounds that failed in part (retried at the next round)."}),
		rollupCorrections: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace,
			Name: "maintain_rollup_corrections_total", Help: "Analytics rollup rows (a sensor's or the fleet's hour) corrected because they drifted from the raw history (a replayed batch)."}),
	}
	if err := metrics.RegisterAll(reg, m.created, m.dropped, m.historyDropped, m.kept, m.defaultRows, m.errors,
		m.keysDeleted, m.reports, m.reportErrors, m.rollupCorrections); err != nil {
		return nil, err
	}
	return m, nil
}
