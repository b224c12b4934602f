package servicetest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Postgres is a private PostgreSQL cluster: initdb into a folder of the
// test's own, the postmaster on a port of its own.
type Postgres struct {
	// URL is the superuser lockstream's URL of the postgres database (trust
	// on the loopback: no password).
	URL string
	d   *daemon
}

// StartPostgres creates a cluster with the newest installed PostgreSQL
// (/usr/lib/postgresql/*/bin) and starts it, with room for the connections of
// a whole topology of processes (max_connections 400, as `make services`
// gives the shared one). fsync is off: the disk is shared by everything on
// the machine, and the cluster's restarts are fast shutdowns, which write
// everything out; it dies with the test.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	bin := postgresBin(t)
	d := newDaemon(t, "postgres", "postgres")
	data := filepath.Join(d.dir, "data")
	d.run(filepath.Join(bin, "initdb"), "-D", data, "-U", "lockstream", "--auth=trust", "-E", "UTF8",
		"--locale=C", "--no-sync", "--no-instructions")
	port := freePort(t)
	d.argv = []string{filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", d.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=400", "-c", "fsync=off"}
	p := &Postgres{URL: fmt.Sprintf("postgres://lockstream@127.0.0.1:%d/postgres?sslmode=disable", port), d: d}
	d.ready = func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, p.URL)
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	}
	d.start()
	return p
}

// Restart shuts the cluster down fast (SIGINT, what `pg_ctl stop -m fast`
// sends: every session ended, open transactions rolled back, a checkpoint),
// waits until the postmaster is gone, and starts it again; it returns once
// the cluster takes connections. Call it from the test's goroutine.
func (p *Postgres) Restart() {
	p.d.t.Helper()
	p.d.restart(syscall.SIGINT)
}

// postgresBin returns the bin folder of the newest PostgreSQL installed the
// Debian way (postgresql-NN).
func postgresBin(t testing.TB) string {
	t.Helper()
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(found) == 0 {
		t.Fatalf("no /usr/lib/postgresql/*/bin/initdb: install the postgresql package (`make services`, as root)")
	}
	slices.SortFunc(found, func(a, b string) int { return version(a) - version(b) })
	return filepath.Dir(found[len(found)-1])
}

// version reads NN from /usr/lib/postgresql/NN/bin/initdb (0 if not a number).
func version(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}
