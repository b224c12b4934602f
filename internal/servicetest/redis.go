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

// StartRedis starts a redis-server configured as `make services` runs the
// shared one: no snapshots, no append-only file. A restart so loses every
// key, as DESIGN.md "Stores" allows of Redis (what it holds is rebuilt or
// expires by itself).
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	d := newDaemon(t, "redis", "redis")
	port := freePort(t)
	d.argv = []string{binary(t, "redis-server", "/usr/sbin"), "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", d.dir, "--daemonize", "no", "--logfile", ""}
	d.ready = dialReady("127.0.0.1:" + strconv.Itoa(port))
	d.start()
	return &Redis{URL: url("redis", port, "/0"), d: d}
}

// Restart stops the server gracefully (SIGTERM: clients disconnected, and,
// without persistence, every key gone), waits until it is gone and starts it
// again. Call it from the test's goroutine.
func (r *Redis) Restart() {
	r.d.t.Helper()
	r.d.restart(syscall.SIGTERM)
}
