package servicetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Mosquitto is a private MQTT broker on a port of its own, with persistence
// in its folder.
type Mosquitto struct {
	// URL is its URL (anonymous clients allowed).
	URL string
	d   *daemon
}

// StartMosquitto starts a mosquitto configured like the shared one (room for
// 100,000 queued QoS 1 messages per session away, see deploy/local/services.sh)
// that also keeps its persistent sessions, their subscriptions and queued
// messages across restarts (persistence, written at a graceful stop).
func StartMosquitto(t testing.TB) *Mosquitto {
	t.Helper()
	d := newDaemon(t, "mosquitto", "mosquitto")
	port := freePort(t)
	conf := filepath.Join(d.dir, "mosquitto.conf")
	content := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location %s/\n"+
		"max_queued_messages 100000\nlog_dest stderr\n", port, d.dir)
	if err := os.WriteFile(conf, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	d.chown(conf)
	d.argv = []string{binary(t, "mosquitto", "/usr/sbin"), "-c", conf}
	d.ready = dialReady("127.0.0.1:" + strconv.Itoa(port))
	d.start()
	return &Mosquitto{URL: url("mqtt", port, ""), d: d}
}

// Restart stops the broker gracefully (SIGTERM: it writes its persistence
// file — the sessions, subscriptions and QoS 1 messages it accepted — and
// closes every connection), waits until it is gone and starts it again. A
// SIGKILL would lose what it accepted since its last autosave, which is
// Mosquitto's own limit, not a fault of the clients the soak tests. Call it
// from the test's goroutine.
func (m *Mosquitto) Restart() {
	m.d.t.Helper()
	m.d.restart(syscall.SIGTERM)
}
