package incident

import "github.com/lockstream/lockstream/internal/settings"

// RegisterSettings declares the incidents' settings. Their interval is the
// escalation rounds' (LOCKSTREAM_ESCALATION_INTERVAL), which the escalation
// command sets in Interval.
func (c *Config) RegisterSettings(s *settings.Set) {
	s.String(&c.PublicURL, "", settings.Decl{Name: "public-url",
		Doc: "incidents: where the API is reachable from outside; reminders carry one-click ack links <public-url>/ack/<token> (empty: no links)"})
	s.Duration(&c.AckTTL, DefaultAckTTL, settings.Decl{Name: "incident-ack-ttl",
		Doc: "incidents: how long a one-click ack link works"})
	s.Duration(&c.Retention, DefaultRetention, settings.Decl{Name: "incident-retention",
		Doc: "incidents: how long a resolved incident and its timeline are kept (0: forever)"})
	s.Int(&c.Batch, DefaultBatch, settings.Decl{Name: "incident-batch",
		Doc: "incidents: client feed events one intake transaction reads at most"})
	s.Int(&c.Limit, DefaultLimit, settings.Decl{Name: "incident-limit",
		Doc: "incidents: incidents one reminder send statement reminds at most; a round's mark is sent in as many as it needs"})
}
