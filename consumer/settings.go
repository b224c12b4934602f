package consumer

import (
	"time"

	"github.com/lockstream/lockstream/internal/settings"
)

// Flapping is the flap detection's settings, which the consumer applies and the
// heartbeat follows (an unstable sensor's losses wait for its window).
type Flapping struct {
	// Changes within Window beyond which a sensor is unstable.
	Changes int
	// Window is the flapping window.
	Window time.Duration
}

// RegisterSettings declares the flapping settings.
func (f *Flapping) RegisterSettings(s *settings.Set) {
	s.Int(&f.Changes, DefaultFlapChanges, settings.Decl{Name: "flap-changes",
		Doc: "a sensor with more changes than this within the flap window is unstable (sensor_unstable; its changes are held)"})
	f.RegisterWindow(s)
}

// RegisterWindow declares the flapping window alone, for the heartbeat.
func (f *Flapping) RegisterWindow(s *settings.Set) {
	s.Duration(&f.Window, DefaultFlapWindow, settings.Decl{Name: "flap-window",
		Doc: "the flapping window; an unstable sensor quiet this long is stable again (sensor_stable with its final state)"})
}
