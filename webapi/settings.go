package webapi

import "github.com/lockstream/lockstream/internal/settings"

// RegisterSettings declares the HTTP API's settings.
func (c *Config) RegisterSettings(s *settings.Set) {
	s.String(&c.Addr, DefaultAddr, settings.Decl{Name: "http-addr", Doc: "HTTP API listen address"})
	s.Duration(&c.ReadTimeout, DefaultReadTimeout, settings.Decl{Name: "http-read-timeout",
		Doc: "HTTP API: longest time to read a request, body included"})
	s.Duration(&c.WriteTimeout, DefaultWriteTimeout, settings.Decl{Name: "http-write-timeout",
		Doc: "HTTP API: longest time from a request's headers to the end of its answer (streaming routes lift it); handlers get two thirds of it"})
	s.Duration(&c.IdleTimeout, DefaultIdleTimeout, settings.Decl{Name: "http-idle-timeout",
		Doc: "HTTP API: keep-alive connections idle for longer are closed"})
	s.String(&c.AdminToken, "", settings.Decl{Name: "admin-token", Secret: true,
		Doc: "bearer token of the admin API (required; make demo generates and prints one)"})
	s.String(&c.IngestToken, "", settings.Decl{Name: "ingest-token", Secret: true,
		Doc: "bearer token of POST /v1/readings; empty = ingest over HTTP off"})
	s.String(&c.PushToken, "", settings.Decl{Name: "push-token", Secret: true,
		Doc: "bearer token of the push API (POST /push, /v1/pushes); empty = push API off"})
	s.Duration(&c.SecretOverlap, DefaultSecretOverlap, settings.Decl{Name: "secret-overlap",
		Doc: "how long a rotated-out client secret keeps signing webhooks alongside the new one"})
}

// RegisterSettings declares the settings of members' inboxes and streams.
func (c *InboxConfig) RegisterSettings(s *settings.Set) {
	s.Duration(&c.NewMemberWindow, DefaultNewMemberWindow, settings.Decl{Name: "new-member-window",
		Doc: "how far back a new member's inbox is filled with the client's messages (at most 20)"})
}
