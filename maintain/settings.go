package maintain

import (
	"fmt"
	"time"

	"github.com/lockstream/lockstream/internal/settings"
)

// RegisterSettings declares maintain's settings.
func (c *Config) RegisterSettings(s *settings.Set) {
	RegisterRetention(s, &c.Retention)
	settings.Func(s, &c.HistoryRetention, 0, ParseRetention, FormatRetention, settings.Decl{Name: "history-retention",
		Doc: "maintain: drop ClickHouse history months ended longer ago than this (0 = keep forever)"})
	s.Duration(&c.Interval, DefaultInterval, settings.Decl{Name: "maintain-interval",
		Doc: "maintain: how often partitions are made ahead and old ones dropped"})
}

// RegisterRetention declares the outbox's retention, bound to p: maintain drops
// what it outlived, and the API refuses to recover deliveries older than it.
func RegisterRetention(s *settings.Set, p *time.Duration) {
	settings.Func(s, p, DefaultRetention, ParseRetention, FormatRetention, settings.Decl{Name: "retention",
		Doc: "maintain: drop whole month partitions of the outbox (and inbox) ended longer ago than this, and delete AMQP notification idempotency keys recorded before it (days: 90d, or a duration)"})
}

// FormatRetention writes a retention as ParseRetention reads it: whole days as
// 90d, anything else as a duration.
func FormatRetention(d time.Duration) string {
	const day = 24 * time.Hour
	if d > 0 && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return settings.FormatDuration(d)
}
