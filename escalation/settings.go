package escalation

import "github.com/lockstream/lockstream/internal/settings"

// RegisterSettings declares the escalation rounds' settings.
func (c *Config) RegisterSettings(s *settings.Set) {
	s.Duration(&c.Interval, DefaultInterval, settings.Decl{Name: "escalation-interval",
		Doc: "escalation: how often a round escalates unseen messages"})
	s.Duration(&c.EmailAfter, DefaultEmailAfter, settings.Decl{Name: "escalate-email-after",
		Doc: "escalation: an episode left unseen this long gets its email (a quarter of it after a critical message)"})
	s.Duration(&c.PushAfter, DefaultPushAfter, settings.Decl{Name: "escalate-push-after",
		Doc: "escalation: an episode left unseen this long gets its push (a quarter of it after a critical message)"})
	s.Int(&c.Limit, DefaultLimit, settings.Decl{Name: "escalation-limit",
		Doc: "escalation: due episodes (and digest members) one round handles at most; a full round is followed by another at once"})
}
