package email

import "github.com/lockstream/lockstream/internal/settings"

// RegisterSettings declares the email sender's settings.
func (c *Config) RegisterSettings(s *settings.Set) {
	s.String(&c.SMTPURL, DefaultSMTPURL, settings.Decl{Name: "smtp-url", Doc: "SMTP server URL"})
}
