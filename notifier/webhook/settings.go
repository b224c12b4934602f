package webhook

import "github.com/lockstream/lockstream/internal/settings"

// RegisterSettings declares the webhook sender's settings.
func (c *Config) RegisterSettings(s *settings.Set) {
	s.Int(&c.PerEndpointConcurrency, DefaultPerEndpointConcurrency, settings.Decl{Name: "webhook-endpoint-concurrency",
		Doc: "webhook requests in flight at once to one endpoint (scheme, host and port)"})
	s.Bool(&c.AllowPrivate, false, settings.Decl{Name: "webhook-allow-private",
		Doc: "let webhooks reach loopback and private addresses (tests, demo)"})
}
