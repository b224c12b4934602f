package webapi

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	lsmetrics "github.com/lockstream/lockstream/internal/metrics"
)

// streamMetrics are the live stream handlers' Prometheus collectors (the hub
// has its own, live.HubMetrics).
type streamMetrics struct {
	sent    *prometheus.CounterVec
	cutoffs *prometheus.CounterVec
	resets  prometheus.Counter
	// unfinished counts the hub's writes at once that the socket did not take
	// whole, left to the stream's writer.
	unfinished prometheus.Counter
	// sentDirect and sentReplayed are sent's two series, looked up once: a
	// message to 10,000 streams counts 10,000 times.
	sentDirect, sentReplayed prometheus.Counter
}

func newStreamMetrics(reg prometheus.Registerer) (*streamMetrics, error) {
	m := &streamMetrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockstream_stream_messages_sent_total",
			Help: "Messages written to live streams: replayed (stored before the stream connected) or direct (arrived while connected).",
		}, []string{"mode"}),
		cutoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockstream_stream_cutoffs_total",
			Help: "Streams ended by the server: slow (a write did not finish within the write timeout), shutdown.",
		}, []string{"reason"}),
		resets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_stream_resets_total", Help: "Streams told to reload: the messages they asked for are no longer stored."}),
		unfinished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_stream_unfinished_writes_total",
			Help: "Messages the hub wrote to a stream at once that the connection did not take whole (its buffer was full): finished by the stream's writer."}),
	}
	if err := lsmetrics.RegisterAll(reg, m.sent, m.cutoffs, m.resets, m.unfinished); err != nil {
		return nil, fmt.Errorf("live streams: %w", err)
	}
	m.sentDirect = m.sent.WithLabelValues("direct")
	m.sentReplayed = m.sent.WithLabelValues("replayed")
	return m, nil
}
