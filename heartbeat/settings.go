package heartbeat

import "github.com/lockstream/lockstream/internal/settings"

// RegisterSettings declares the heartbeat's settings. FlapWindow is the
// consumer's (consumer.Flapping), which the heartbeat follows.
func (c *Config) RegisterSettings(s *settings.Set) {
	s.Duration(&c.Timeout, DefaultTimeout, settings.Decl{Name: "heartbeat-timeout",
		Doc: "silence after which a sensor's connection is lost"})
	s.Duration(&c.SweepInterval, DefaultSweepInterval, settings.Decl{Name: "heartbeat-sweep-interval",
		Doc: "how often the heartbeat looks for silent sensors"})
	s.Duration(&c.RebuildHistoryWait, DefaultRebuildHistoryWait, settings.Decl{Name: "heartbeat-rebuild-history-wait",
		Doc: "how long a rebuild of the heartbeat's Redis sets waits for the history writer to store the events published before it; past it the rebuild reads what ClickHouse has"})
	s.Int(&c.SiteOutageMin, DefaultSiteOutageMin, settings.Decl{Name: "site-outage-min",
		Doc: "sensors of a site (and at least half of it) lost within one heartbeat timeout that make one site_outage"})
	s.Duration(&c.SiteHold, 0, settings.Decl{Name: "site-hold",
		Doc: "how long the loss of a sensor with a site waits after its deadline for the site to be judged; 0 = timeout/10 + 2 sweep intervals + 1s"})
}
