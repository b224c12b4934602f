package bridgetest

import (
	"context"
	"fmt"
	"net"
	"net/url"
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

// rabbitmqBin is where Debian's rabbitmq-server package puts the broker's own
// scripts (those in /usr/sbin are wrappers that switch to the rabbitmq user).
const rabbitmqBin = "/usr/lib/rabbitmq/bin"

const howToStartNode = "the test starts a RabbitMQ node of its own with the local installation's " +
	rabbitmqBin + "/rabbitmq-server as the rabbitmq user, which needs root and the rabbitmq-server package " +
	"(`make services`, as root, installs it)"

// Node is a RabbitMQ node of one test's own, on its own port, data folder and
// node name, beside the shared local broker: a test that stops and starts the
// broker (rabbitmqctl stop_app, start_app) does it to this node, so the tests
// and processes using the shared broker at that moment see nothing. It is
// killed, and its folder removed, when the test ends.
type Node struct {
	t    testing.TB
	Name string
	// URL is its AMQP URL (guest, as on the shared broker).
	URL  string
	dir  string
	log  string
	env  []string // the node's settings, the same at each start
	cred *syscall.Credential
	// cmd is the running VM (the latest, after a restart); done closes when
	// it exits.
	cmd  *exec.Cmd
	done chan struct{}
}

// StartNode starts a RabbitMQ node and waits until it runs, failing t with
// instructions when it cannot.
func StartNode(t testing.TB) *Node {
	t.Helper()
	account, err := user.Lookup("rabbitmq")
	if err != nil {
		t.Fatalf("no rabbitmq user (%v): %s", err, howToStartNode)
	}
	uid, _ := strconv.Atoi(account.Uid)
	gid, _ := strconv.Atoi(account.Gid)
	// Not t.TempDir: the node runs as rabbitmq, which cannot enter the test's
	// private temporary folders.
	dir, err := os.MkdirTemp("", "lstest-rabbitmq-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	port, dist := freePort(t), freePort(t)
	n := &Node{t: t, Name: "lstest-" + Suffix(t) + "@localhost", dir: dir,
		URL: fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", port)}
	n.log = filepath.Join(dir, "log", n.Name+".log")
	files := map[string]string{
		"rabbitmq.conf":     fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\n", port),
		"enabled_plugins":   "[].\n",
		"rabbitmq-env.conf": "", // not the shared broker's, which names its node
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, uid, gid)
	}); err != nil {
		t.Fatalf("handing %s to the rabbitmq user: %v: %s", dir, err, howToStartNode)
	}

	n.env = []string{
		"HOME=/var/lib/rabbitmq", // the shared broker's Erlang cookie: rabbitmqctl reaches both
		"RABBITMQ_NODENAME=" + n.Name,
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(port),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(dist),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(dir, "log"),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		// The script then execs the Erlang VM, which so keeps Pdeathsig: the
		// node dies with the test binary, whatever happens to it.
		"RUNNING_UNDER_SYSTEMD=true",
	}
	n.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	t.Cleanup(func() {
		if n.cmd != nil {
			_ = n.cmd.Process.Signal(syscall.SIGKILL)
			<-n.done
		}
	})
	n.start()
	n.awaitStartup()
	return n
}

// start starts the node's Erlang VM.
func (n *Node) start() {
	n.t.Helper()
	cmd := exec.Command(filepath.Join(rabbitmqBin, "rabbitmq-server"))
	cmd.Dir = n.dir
	cmd.Env = append(os.Environ(), n.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: n.cred, Pdeathsig: syscall.SIGKILL}
	out, err := os.OpenFile(filepath.Join(n.dir, "stdout"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		n.t.Fatalf("starting a RabbitMQ node: %v: %s", err, howToStartNode)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = out.Close()
		close(done)
	}()
	n.cmd, n.done = cmd, done
}

// Restart stops the whole node gracefully (SIGTERM, which RabbitMQ takes as
// rabbitmqctl stop: connections closed, queues and their persistent messages
// written, the Erlang VM gone) and starts it again on the same ports and data
// folder, returning once its AMQP listener, which opens last as the node
// boots, takes connections. It spares the two rabbitmqctl runs (an Erlang VM
// each, seconds on a loaded machine) that stopping and awaiting through the
// CLI would add to the outage. Call it from the test's goroutine (it fails t
// with Fatalf).
func (n *Node) Restart() {
	n.t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		n.t.Fatalf("stopping the RabbitMQ node %s: %v", n.Name, err)
	}
	select {
	case <-n.done:
	case <-time.After(2 * time.Minute):
		n.t.Fatalf("the RabbitMQ node %s did not exit within 2m of SIGTERM:\n%s", n.Name, n.output())
	}
	n.start()
	u, _ := url.Parse(n.URL)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-n.done:
			n.t.Fatalf("the RabbitMQ node %s exited while starting again:\n%s", n.Name, n.output())
		default:
		}
		if c, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("the RabbitMQ node %s did not listen again within 2m:\n%s", n.Name, n.output())
		}
		time.Sleep(100 * time.Millisecond) // until the listener opens
	}
}

// awaitStartup waits until the node has booted, failing t with its log when
// it exits or does not boot within two minutes.
func (n *Node) awaitStartup() {
	n.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-n.done:
			n.t.Fatalf("the RabbitMQ node %s exited while starting: %s\n%s", n.Name, howToStartNode, n.output())
		default:
		}
		if _, err := n.ctl(30*time.Second, "await_startup", "--timeout", "30"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("the RabbitMQ node %s did not start within 2m:\n%s", n.Name, n.output())
		}
		time.Sleep(200 * time.Millisecond) // until the node answers rabbitmqctl at all
	}
}

// output is the end of the node's log and console output, for failures.
func (n *Node) output() string {
	var b strings.Builder
	for _, path := range []string{filepath.Join(n.dir, "stdout"), n.log} {
		if raw, err := os.ReadFile(path); err == nil {
			fmt.Fprintf(&b, "%s:\n%s\n", path, tail(string(raw), 3000))
		}
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// ctl runs rabbitmqctl against the node (through the wrapper that switches to
// the rabbitmq user, whose Erlang cookie the node shares).
func (n *Node) ctl(timeout time.Duration, args ...string) (string, error) {
	path, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		path = "/usr/sbin/rabbitmqctl"
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, append([]string{"-n", n.Name}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rabbitmqctl -n %s %s: %w\n%s", n.Name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Ctl runs rabbitmqctl against the node and returns its output, failing t
// when it fails.
func (n *Node) Ctl(args ...string) string {
	n.t.Helper()
	out, err := n.ctl(60*time.Second, args...)
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

// StopApp stops the RabbitMQ application of the node (the Erlang VM stays):
// every connection is closed and the port stops listening, as in a broker
// restart. Nothing needs restoring should the test fail before StartApp: the
// node is the test's own, killed at its end.
func (n *Node) StopApp() {
	n.t.Helper()
	n.Ctl("stop_app")
}

// StartApp starts the node's RabbitMQ application again and waits until it
// runs.
func (n *Node) StartApp() {
	n.t.Helper()
	n.Ctl("start_app")
	n.Ctl("await_startup", "--timeout", "60")
}

// QueueMessages returns how many messages queue holds on the node, ready and
// unacknowledged together.
func (n *Node) QueueMessages(queue string) int {
	n.t.Helper()
	return queueMessages(n.t, n.Ctl("list_queues", "--quiet", "--no-table-headers", "name", "messages"), queue)
}

// QueueType returns the type of queue on the node (classic, quorum).
func (n *Node) QueueType(queue string) string {
	n.t.Helper()
	return queueType(n.t, n.Ctl("list_queues", "--quiet", "--no-table-headers", "name", "type"), queue)
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
