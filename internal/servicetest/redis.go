package servicetest

import (
	"strconv"
	"syscall"
	"testing"
)

// Redis is a private redis-server on a port of its own.
type Redis struct {
	// URL is its URL (database 0).
	URL string
	d   *daemon
}

// StartRedis starts a redis-server with an append-only file (fsync every
// second, no snapshots), as a production Redis runs: a restart keeps the keys.
// (The shared one that `make services` starts keeps nothing; a Redis that
// lost its data is a fault of its own, which the heartbeat's rebuild answers
// — see DESIGN.md "Chaos soak" for what the soak leaves to other tests.)
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	d := newDaemon(t, "redis", "redis")
	port := freePort(t)
	d.argv = []string{binary(t, "redis-server", "/usr/sbin"), "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--dir", d.dir, "--daemonize", "no", "--logfile", ""}
	d.ready = dialReady("127.0.0.1:" + strconv.Itoa(port))
	d.start()
	return &Redis{URL: url("redis", port, "/0"), d: d}
}

// Restart stops the server gracefully (SIGTERM: clients disconnected, the
// append-only file written out and synced), waits until it is gone and starts
// it again, with the keys it had. Call it from the test's goroutine.
func (r *Redis) Restart() {
	r.d.t.Helper()
	r.d.restart(syscall.SIGTERM)
}
