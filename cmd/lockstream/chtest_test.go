package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockstream/lockstream/storage"
)

// clickHouseServerPath is where Debian's clickhouse-server package puts the server
// (18.16 on these machines; `make services` installs it).
const clickHouseServerPath = "/usr/sbin/clickhouse-server"

// chServer is a ClickHouse server private to one test: its own data directory, its
// own ports on 127.0.0.1 and its own users file, so the test may kill and restart
// it without touching the shared server on 9000 that other tests use.
type chServer struct {
	t        testing.TB
	dir      string
	tcpPort  int
	httpPort int

	cmd  *exec.Cmd
	done chan struct{} // closed when the running server exited
	out  *logBuffer    // the server's stdout and stderr; its logs are files in dir
}

// startClickHouse starts a private ClickHouse server for t, waits until it answers
// and stops it (SIGKILL) when t ends.
func startClickHouse(t testing.TB) *chServer {
	t.Helper()
	if _, err := os.Stat(clickHouseServerPath); err != nil {
		t.Fatalf("a private ClickHouse needs %s (Debian package clickhouse-server; `make services` installs it): %v",
			clickHouseServerPath, err)
	}
	tcpPort := stablePort(t)
	s := &chServer{t: t, dir: t.TempDir(), tcpPort: tcpPort, httpPort: stablePort(t, tcpPort)}
	if err := os.WriteFile(filepath.Join(s.dir, "config.xml"), []byte(s.config()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "users.xml"), []byte(chUsers), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s.running() {
			s.kill()
		}
		if t.Failed() {
			s.logTail()
		}
	})
	s.start()
	return s
}

// URL returns the native-protocol URL of database db on the server.
func (s *chServer) URL(db string) string {
	return fmt.Sprintf("clickhouse://127.0.0.1:%d/%s", s.tcpPort, db)
}

// start runs the server on its data directory and ports and waits until it
// answers a ping.
func (s *chServer) start() {
	s.t.Helper()
	if s.running() {
		s.t.Fatal("clickhouse: start while running")
	}
	s.out = &logBuffer{}
	cmd := exec.Command(clickHouseServerPath, "--config-file="+filepath.Join(s.dir, "config.xml"))
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = s.out, s.out
	// Should the test binary die without its cleanups, the server goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting clickhouse-server: %v", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.done)

	deadline := time.Now().Add(60 * time.Second)
	for {
		err := s.ping()
		if err == nil {
			return
		}
		if !s.running() {
			s.logTail()
			s.t.Fatalf("clickhouse-server exited at start-up: %v", err)
		}
		if time.Now().After(deadline) {
			s.logTail()
			s.t.Fatalf("clickhouse-server on port %d does not answer after 60 s: %v", s.tcpPort, err)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}

func (s *chServer) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ch, err := storage.OpenClickHouse(ctx, s.URL("default"))
	if err != nil {
		return err
	}
	return errors.Join(ch.Ping(ctx), ch.Close())
}

// kill stops the server with SIGKILL, the harshest outage, and waits until it is
// gone. Its data directory stays, so start brings the same data back.
func (s *chServer) kill() {
	s.t.Helper()
	if !s.running() {
		s.t.Fatal("clickhouse: kill while not running")
	}
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Fatalf("killing clickhouse-server: %v", err)
	}
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		s.t.Fatal("clickhouse-server still running 60 s after SIGKILL")
	}
}

func (s *chServer) running() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// logTail logs the end of the server's own output and error log.
func (s *chServer) logTail() {
	s.t.Helper()
	errLog, _ := os.ReadFile(filepath.Join(s.dir, "server.err.log"))
	out := ""
	if s.out != nil {
		out = s.out.String()
	}
	s.t.Logf("private clickhouse-server (port %d) output:\n%s\nerror log (end):\n%s",
		s.tcpPort, tail(out, 2048), tail(string(errLog), 4096))
}

// config is a minimal server configuration: everything under dir, small caches,
// listening on loopback only.
func (s *chServer) config() string {
	r := strings.NewReplacer("DIR", s.dir, "TCP_PORT", fmt.Sprint(s.tcpPort), "HTTP_PORT", fmt.Sprint(s.httpPort))
	return r.Replace(`<?xml version="1.0"?>
<yandex>
    <logger>
        <level>information</level>
        <log>DIR/server.log</log>
        <errorlog>DIR/server.err.log</errorlog>
        <size>10M</size>
        <count>1</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>TCP_PORT</tcp_port>
    <http_port>HTTP_PORT</http_port>
    <max_connections>256</max_connections>
    <keep_alive_timeout>3</keep_alive_timeout>
    <max_concurrent_queries>64</max_concurrent_queries>
    <uncompressed_cache_size>67108864</uncompressed_cache_size>
    <mark_cache_size>67108864</mark_cache_size>
    <path>DIR/data/</path>
    <tmp_path>DIR/tmp/</tmp_path>
    <user_files_path>DIR/user_files/</user_files_path>
    <format_schema_path>DIR/format_schemas/</format_schema_path>
    <users_config>DIR/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <mlock_executable>false</mlock_executable>
</yandex>
`)
}

// chUsers is the users file of a private server: the default user, no password,
// from loopback only (what /etc/clickhouse-server/users.xml grants, minus the
// readonly user).
const chUsers = `<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <max_memory_usage>2000000000</max_memory_usage>
            <use_uncompressed_cache>0</use_uncompressed_cache>
            <load_balancing>random</load_balancing>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks>
                <ip>127.0.0.1</ip>
                <ip>::1</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
`

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that freeAddr never returned.
func freePort(t testing.TB) int {
	t.Helper()
	addr, err := net.ResolveTCPAddr("tcp", freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	return addr.Port
}

// stablePort returns a TCP port on 127.0.0.1, other than avoid, that was free a
// moment ago and lies below the kernel's ephemeral range (32768 and up), so no
// outgoing connection takes it while a server is down between a kill and a
// restart on the same port.
func stablePort(t testing.TB, avoid ...int) int {
	t.Helper()
	for range 200 {
		port := 20000 + rand.IntN(12000)
		if slices.Contains(avoid, port) {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return port
	}
	t.Fatal("no free port between 20000 and 32000")
	return 0
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
