package swrve

import "github.com/lockstream/lockstream/internal/settings"

// RegisterSettings declares the Swrve sender's settings.
func (c *Config) RegisterSettings(s *settings.Set) {
	s.String(&c.URL, DefaultURL, settings.Decl{Name: "swrve-url", Doc: "Swrve push API URL"})
	s.Float(&c.Rate, DefaultRate, settings.Decl{Name: "swrve-rate",
		Doc: "Swrve sends started per second at most, by every retrier process together (shared through Redis)"})
	s.String(&c.PushKeysFile, "", settings.Decl{Name: "swrve-push-keys", Doc: "YAML file mapping message prototypes to push keys"})
}
