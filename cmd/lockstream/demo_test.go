package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/notifier/swrve"
)

// TestDemoPushKeysCoverEveryPrototype keeps the demo's Swrve keys file whole:
// deploy/local/demo.sh writes a push key for each prototype of its list, and a
// push whose prototype has none fails. The list must name every prototype
// lockstream pushes: one per event type, and the escalations'.
func TestDemoPushKeysCoverEveryPrototype(t *testing.T) {
	script, err := os.ReadFile("../../deploy/local/demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)\npush_prototypes="([^"]*)"`).FindSubmatch(script)
	if m == nil {
		t.Fatal(`deploy/local/demo.sh has no push_prototypes="…" list`)
	}
	listed := map[string]bool{}
	for _, p := range strings.Fields(string(m[1])) {
		listed[p] = true
	}
	want := []string{inbox.UnseenPushPrototype}
	for _, typ := range event.Types() {
		want = append(want, swrve.PrototypePrefix+string(typ))
	}
	for _, p := range want {
		if !listed[p] {
			t.Errorf("demo.sh's push_prototypes lacks %s", p)
		}
	}
}
