package retrier

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/internal/metrics"
)

// retrierMetrics are the Retrier's instruments.
type retrierMetrics struct {
	deliveries     *prometheus.CounterVec
	attempts       *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	depth          *prometheus.GaugeVec
	oldestDue      prometheus.Gauge
	requeued       prometheus.Counter
	handedOver     prometheus.Counter
	fenced         prometheus.Counter
	errors         *prometheus.CounterVec
	attemptsCopied prometheus.Counter
	notSent        prometheus.Counter

	rateLimited       prometheus.Counter
	endpointBlocks    prometheus.Counter
	endpointsDisabled prometheus.Counter
	endpointNotices   prometheus.Counter
	// endpointNoticesPublished counts notices put on clients' feeds.
	endpointNoticesPublished prometheus.Counter
	// quietHeld counts member pushes and emails held for quiet hours.
	quietHeld prometheus.Counter
	listening prometheus.Gauge
}

func newRetrierMetrics(reg prometheus.Registerer) (*retrierMetrics, error) {
	m := &retrierMetrics{}
	var err error
	if m.deliveries, err = metrics.NewDeliveriesTotal(reg); err != nil {
		return nil, err
	}
	if m.attempts, err = metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "delivery_attempts_total",
		Help: "Delivery attempts made, by channel and error type (none for a sent one).",
	}, []string{"channel", "error_type"})); err != nil {
		return nil, err
	}
	if m.latency, err = metrics.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metrics.Namespace, Name: "delivery_latency_seconds",
		Help: "Time from an event to its delivery being SENT, by channel.",
		// 10ms to about 4.4h: from an instant send to one that took every retry.
		Buckets: prometheus.ExponentialBuckets(0.01, 3, 14),
	}, []string{"channel"})); err != nil {
		return nil, err
	}
	if m.depth, err = metrics.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "outbox_depth",
		Help: "Deliveries that may still be sent, by state (SCHEDULED, PENDING, RETRY, IN_FLIGHT).",
	}, []string{"state"})); err != nil {
		return nil, err
	}
	if m.oldestDue, err = metrics.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "outbox_oldest_due_seconds",
		Help: "How long the longest-waiting due delivery has been due; 0 when none is.",
	})); err != nil {
		return nil, err
	}
	if m.requeued, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "deliveries_requeued_total",
		Help: "IN_FLIGHT deliveries put back to PENDING because their retrier's lease ran out.",
	})); err != nil {
		return nil, err
	}
	if m.handedOver, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "deliveries_handed_over_total",
		Help: "Webhook deliveries the fan-out of this process created claimed and handed over, sent without a claim.",
	})); err != nil {
		return nil, err
	}
	if m.fenced, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "delivery_outcomes_fenced_total",
		Help: "Attempt outcomes not recorded because the delivery's lease ran out and it moved on.",
	})); err != nil {
		return nil, err
	}
	if m.errors, err = metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "retrier_errors_total",
		Help: "Retrier store operations that failed, by operation (claim, target, finish, requeue, stats, attempts, listen).",
	}, []string{"op"})); err != nil {
		return nil, err
	}
	if m.attemptsCopied, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "delivery_attempts_copied_total",
		Help: "Delivery attempts copied from the Postgres attempt log to ClickHouse.",
	})); err != nil {
		return nil, err
	}
	if m.notSent, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "delivery_attempts_not_sent_total",
		Help: "Claimed deliveries put back unsent, their attempt given back, because the store could not say what to send.",
	})); err != nil {
		return nil, err
	}
	if err := m.registerControls(reg); err != nil {
		return nil, err
	}
	if m.listening, err = metrics.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Name: "retrier_listening",
		Help: "1 while the retrier listens for new deliveries (Postgres LISTEN), 0 while it only polls.",
	})); err != nil {
		return nil, err
	}
	return m, nil
}

// registerControls registers the delivery controls' instruments.
func (m *retrierMetrics) registerControls(reg prometheus.Registerer) error {
	var err error
	if m.rateLimited, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "deliveries_rate_limited_total",
		Help: "Webhook deliveries held back, their attempt given back, by their endpoint's rate limit, a 429's Retry-After or the endpoint being disabled.",
	})); err != nil {
		return err
	}
	if m.endpointBlocks, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "endpoint_429_holds_total",
		Help: "Webhook endpoints held back for every retrier after answering 429 with Retry-After.",
	})); err != nil {
		return err
	}
	if m.endpointsDisabled, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "endpoints_disabled_total",
		Help: "Webhook endpoints disabled because every attempt failed for LOCKSTREAM_ENDPOINT_DISABLE_AFTER.",
	})); err != nil {
		return err
	}
	if m.endpointNotices, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "endpoint_notices_mailed_total",
		Help: "Emails sent to clients' owners about their webhook endpoint (failing, disabled, recovered).",
	})); err != nil {
		return err
	}
	if m.quietHeld, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "deliveries_quiet_held_total",
		Help: "Members' non-critical pushes and emails held back until their quiet hours end.",
	})); err != nil {
		return err
	}
	if m.endpointNoticesPublished, err = metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "endpoint_notices_published_total",
		Help: "Operational notices (endpoint_failing, endpoint_disabled, endpoint_recovered) put on clients' feeds and members' inboxes.",
	})); err != nil {
		return err
	}
	return nil
}
