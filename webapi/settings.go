package webapi

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockstream/lockstream/internal/settings"
)

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
	s.String(&c.V1Token, "", settings.Decl{Name: "v1-token", Secret: true,
		Doc: "bearer token the CyVerse notification API v1 routes (GET /messages, POST /seen, …) accept besides the admin token; empty = admin token only"})
	s.Duration(&c.SecretOverlap, DefaultSecretOverlap, settings.Decl{Name: "secret-overlap",
		Doc: "how long a rotated-out client secret keeps signing webhooks alongside the new one"})
}

// RegisterSettings declares the settings of members' inboxes and streams.
func (c *InboxConfig) RegisterSettings(s *settings.Set) {
	s.Duration(&c.NewMemberWindow, DefaultNewMemberWindow, settings.Decl{Name: "new-member-window",
		Doc: "how far back a new member's inbox is filled with the client's messages (at most 20)"})
	settings.Func(s, &c.MemberTokenIdle, DefaultMemberTokenIdle, parseTokenIdle, formatDays, settings.Decl{Name: "member-token-idle",
		Doc: "a member token unused this long stops working (401) until rotated with POST /v1/members/{id}/token (days: 60d, or a duration)"})
}

// parseTokenIdle reads LOCKSTREAM_MEMBER_TOKEN_IDLE: a positive number of days
// ("60d") or Go duration.
func parseTokenIdle(text string) (time.Duration, error) {
	text = strings.TrimSpace(text)
	var d time.Duration
	if days, ok := strings.CutSuffix(text, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, fmt.Errorf("want a number of days (60d) or a duration (1440h), got %q", text)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(text); err != nil {
			return 0, fmt.Errorf("want a number of days (60d) or a duration (1440h), got %q", text)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %q", text)
	}
	return d, nil
}
