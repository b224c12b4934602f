package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// storePingTimeout bounds one store's ping, in a scrape and in GET /readyz
// (webapi.Health).
const storePingTimeout = 2 * time.Second

// storeScrapeReuse is how long a scrape's pings answer the scrapes after it:
// scrapes a few milliseconds apart (several Prometheus servers, or the
// pipeline benchmark reading the registry 40 times a second) then cost the
// stores nothing.
const storeScrapeReuse = time.Second

// pinger is a store a process can ping.
type pinger interface {
	Ping(ctx context.Context) error
}

// storeProbe pings the stores a process opened: when Prometheus scrapes it, as
// lockstream_store_up{store}, so an alert names an unreachable store even in a
// process without the API. GET /readyz pings the same stores (node.health).
type storeProbe struct {
	desc   *prometheus.Desc
	stores map[string]pinger
	logger *slog.Logger

	reuse    time.Duration // storeScrapeReuse; tests set 0
	mu       sync.Mutex    // guards the last scrape's pings
	pingedAt time.Time
	pinged   map[string]error
}

// newStoreProbe probes the stores of n that are open.
func newStoreProbe(n *node) *storeProbe {
	stores := map[string]pinger{}
	if n.pg != nil {
		stores["postgres"] = n.pg
	}
	if n.redis != nil {
		stores["redis"] = n.redis
	}
	if n.ch != nil {
		stores["clickhouse"] = n.ch
	}
	return &storeProbe{
		desc: prometheus.NewDesc("lockstream_store_up",
			"1 when the store answered a ping at scrape time (within 2 s), 0 when not; one series per store the process uses.",
			[]string{"store"}, nil),
		stores: stores,
		logger: n.logger,
		reuse:  storeScrapeReuse,
	}
}

// ping pings every store at once and returns each one's error (nil when up).
func (p *storeProbe) ping(ctx context.Context) map[string]error {
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		results = make(map[string]error, len(p.stores))
	)
	for name, store := range p.stores {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, storePingTimeout)
			defer cancel()
			err := store.Ping(ctx)
			mu.Lock()
			results[name] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	return results
}

// Describe implements prometheus.Collector.
func (p *storeProbe) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

// Collect implements prometheus.Collector: a scrape pings the stores, unless
// one did less than storeScrapeReuse ago.
func (p *storeProbe) Collect(ch chan<- prometheus.Metric) {
	p.mu.Lock()
	if time.Since(p.pingedAt) >= p.reuse {
		p.pinged, p.pingedAt = p.ping(context.Background()), time.Now()
	}
	pinged := p.pinged
	p.mu.Unlock()
	for name, err := range pinged {
		up := 1.0
		if err != nil {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, up, name)
	}
}
