package fanout

import "github.com/lockstream/lockstream/internal/settings"

// RegisterSettings declares the fan-out's settings.
func (c *Config) RegisterSettings(s *settings.Set) {
	s.Int(&c.Writers, DefaultWriters, settings.Decl{Name: "fanout-writers",
		Doc: "fan-out transactions written at once in this process (each partition always goes to the same one, which keeps its order)"})
	s.Duration(&c.HandoffWait, DefaultHandoffWait, settings.Decl{Name: "fanout-handoff-wait",
		Doc: "how long a batch waits, at most, for the webhook sender in its process to free places when a burst outruns it (the burst waits in the stream instead of as PENDING rows); 0 writes what has no place PENDING at once, for retrier processes beside `all` to share"})
	s.Duration(&c.InboxCopyDelay, DefaultInboxCopyDelay, settings.Decl{Name: "fanout-inbox-copy-delay",
		Doc: "how long after a commit that wrote shared inbox messages the fan-out writes their members' own copies (off the live streams' path; reads of an inbox write its copies first)"})
}
