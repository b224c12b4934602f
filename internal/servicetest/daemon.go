// Package servicetest starts private instances of the local services —
// PostgreSQL, Redis and Mosquitto — on ports, folders and data of one test's
// own, which the test may restart for real (a fast shutdown, a SIGTERM) while
// the shared instances that `make services` starts, and every other test and
// engineer on the machine uses, go on untouched. The RabbitMQ counterpart is
// bridgetest.Node. Each instance dies with the test binary (Pdeathsig) and is
// killed, its folder removed, when the test ends, whether it passed or not.
//
// They run the Debian packages' binaries that `make services` installs, as the
// packages' users when the test runs as root (PostgreSQL refuses root), else
// as the test's own user.
package servicetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds a start (until the service answers) and a stop (until
// the process exits), on a loaded machine.
const startTimeout = 2 * time.Minute

// daemon is one private server process: started, stopped by a signal and
// started again with the same arguments, folder and port.
type daemon struct {
	t    testing.TB
	name string
	argv []string
	dir  string // its folder, removed at the test's end
	log  string // where its output goes (appended across restarts)
	cred *syscall.Credential
	// ready reports nil once the server answers.
	ready func(context.Context) error

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
}

// newDaemon creates the folder of a server that runs as account (when the
// test runs as root) and removes it when t ends.
func newDaemon(t testing.TB, name, account string) *daemon {
	t.Helper()
	// Not t.TempDir: the server runs as another user, which cannot enter the
	// test's private temporary folders.
	dir, err := os.MkdirTemp("", "lstest-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{t: t, name: name, dir: dir, log: filepath.Join(dir, name+".log")}
	t.Cleanup(func() {
		d.kill()
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() != 0 {
		return d
	}
	u, err := user.Lookup(account)
	if err != nil {
		t.Fatalf("no %s user to run a private %s as (%v): install its package (`make services`, as root)", account, name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	d.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	d.chown(dir)
	return d
}

// chown hands path to the server's user (when it has one of its own).
func (d *daemon) chown(path string) {
	d.t.Helper()
	if d.cred == nil {
		return
	}
	if err := os.Chown(path, int(d.cred.Uid), int(d.cred.Gid)); err != nil {
		d.t.Fatalf("handing %s to the %s user: %v", path, d.name, err)
	}
}

// run runs a one-off command (initdb) as the server's user.
func (d *daemon) run(argv ...string) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = d.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: d.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		d.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// start starts the server and waits until it answers, failing t with the
// end of its log when it exits first or does not answer in time.
func (d *daemon) start() {
	d.t.Helper()
	cmd := exec.Command(d.argv[0], d.argv[1:]...)
	cmd.Dir = d.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: d.cred, Pdeathsig: syscall.SIGKILL}
	out, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		d.t.Fatalf("starting a private %s (%s): %v; `make services` (as root) installs it", d.name, d.argv[0], err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = out.Close()
		close(done)
	}()
	d.cmd, d.done = cmd, done
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			d.t.Fatalf("the private %s exited while starting:\n%s", d.name, d.output())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := d.ready(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("the private %s does not answer %v after starting (%v):\n%s", d.name, startTimeout, err, d.output())
		}
		time.Sleep(100 * time.Millisecond) // until it answers
	}
}

// stop sends sig (the server's graceful shutdown) and waits until it exits.
func (d *daemon) stop(sig syscall.Signal) {
	d.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatalf("stopping the private %s: %v", d.name, err)
	}
	select {
	case <-d.done:
	case <-time.After(startTimeout):
		d.t.Fatalf("the private %s did not exit within %v of %v:\n%s", d.name, startTimeout, sig, d.output())
	}
}

// restart stops the server with sig, waits until it is gone, and starts it
// again.
func (d *daemon) restart(sig syscall.Signal) {
	d.t.Helper()
	d.stop(sig)
	d.start()
}

// kill ends the server at once (the test's end).
func (d *daemon) kill() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// output is the end of the server's log, for failures.
func (d *daemon) output() string {
	raw, err := os.ReadFile(d.log)
	if err != nil {
		return err.Error()
	}
	if len(raw) > 4000 {
		raw = raw[len(raw)-4000:]
	}
	return string(raw)
}

// dialReady reports nil once something accepts TCP connections at addr.
func dialReady(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var dialer net.Dialer
		c, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// freePort returns a loopback port nothing listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// binary finds a server's executable: on the PATH, else in the folders given
// (Debian puts daemons in /usr/sbin, which some PATHs lack).
func binary(t testing.TB, name string, dirs ...string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("%v", errors.New(name+" is not installed: `make services` (as root) installs it"))
	return ""
}

// url formats a service URL on the loopback.
func url(scheme string, port int, rest string) string {
	return fmt.Sprintf("%s://127.0.0.1:%d%s", scheme, port, rest)
}
