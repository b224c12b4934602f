package retrier

import "github.com/lockstream/lockstream/internal/settings"

// RegisterSettings declares the retrier's settings.
func (c *Config) RegisterSettings(s *settings.Set) {
	s.Int(&c.MaxAttempts, DefaultMaxAttempts, settings.Decl{Name: "retry-max-attempts", Doc: "delivery attempts before GIVEN_UP"})
	s.Duration(&c.BackoffBase, DefaultBackoffBase, settings.Decl{Name: "retry-backoff-base",
		Doc: "scale of the logarithmic back-off between delivery attempts (the 10th attempt lands about 2 h after the first)"})
	s.Duration(&c.Lease, DefaultLease, settings.Decl{Name: "retry-lease",
		Doc: "how long a claimed delivery stays IN_FLIGHT before another retrier may take it over (a crashed retrier's deliveries wait this long); a lease of 1m or less also shortens the attempt timeout (1m) to half of it"})
	s.Int(&c.Workers, DefaultWorkers, settings.Decl{Name: "retry-workers",
		Doc: "webhook and email attempts in flight at once in this process (Swrve pushes have a pool of their own; chosen with lockstream bench pipeline)"})
	s.Duration(&c.DisableAfter, DefaultDisableAfter, settings.Decl{Name: "endpoint-disable-after",
		Doc: "a webhook endpoint whose every attempt failed for this long (with at least LOCKSTREAM_ENDPOINT_DISABLE_MIN_FAILURES failures) is disabled"})
	s.Int(&c.DisableMinFailures, DefaultDisableMinFailures, settings.Decl{Name: "endpoint-disable-min-failures",
		Doc: "the fewest failed attempts that disable a webhook endpoint"})
	s.Int(&c.FailingAfter, DefaultFailingAfter, settings.Decl{Name: "endpoint-failing-after",
		Doc: "consecutive failed attempts after which a client is told (feed, email, members' inboxes) that its webhook endpoint is failing: once per failing streak"})
}
