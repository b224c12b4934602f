package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/lockstream/lockstream/internal/settings"
	"github.com/lockstream/lockstream/notifier/swrve/swrvetest"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/stream"
)

// The settings of the binary itself: what no box owns. The boxes' own settings are
// declared in their packages (webapi.Config.RegisterSettings and the like).

// processSettings are every command's.
type processSettings struct {
	LogLevel string
}

// RegisterSettings declares the process's settings.
func (c *processSettings) RegisterSettings(s *settings.Set) {
	s.String(&c.LogLevel, "info", settings.Decl{Name: "log-level", Doc: "debug, info, warn or error"})
}

// nodeSettings are the stores, the Kafka cluster and the local folder of a process:
// only those its need names are declared, and openNode opens only those.
type nodeSettings struct {
	need storeSet

	PGURL         string
	RedisURL      string
	RedisPrefix   string
	ClickHouseURL string
	Stream        stream.Config
	DataDir       string
	SecretKey     string

	// statements, when set, counts every statement the node's Postgres pool
	// sends (`lockstream bench pipeline`); not a setting.
	statements *storage.StatementCounter
}

// DefaultPGURL and the others are where `make services` starts the stores.
const (
	DefaultPGURL         = "postgres://lockstream:lockstream@127.0.0.1:5432/lockstream?sslmode=disable"
	DefaultRedisURL      = "redis://127.0.0.1:6379/0"
	DefaultRedisPrefix   = "lockstream:"
	DefaultClickHouseURL = "clickhouse://127.0.0.1:9000/lockstream"
	DefaultDataDir       = "./data"
)

// RegisterSettings declares the settings of the stores in need.
func (c *nodeSettings) RegisterSettings(s *settings.Set) {
	if c.need&usesPostgres != 0 {
		s.String(&c.PGURL, DefaultPGURL, settings.Decl{Name: "pg-url", Doc: "Postgres URL"})
	}
	if c.need&usesRedis != 0 {
		s.String(&c.RedisURL, DefaultRedisURL, settings.Decl{Name: "redis-url", Doc: "Redis URL"})
		s.String(&c.RedisPrefix, DefaultRedisPrefix, settings.Decl{Name: "redis-prefix",
			Doc: "prefix of every Redis key, so deployments can share a server"})
	}
	if c.need&(usesClickHouse|usesClickHouseLazily) != 0 {
		s.String(&c.ClickHouseURL, DefaultClickHouseURL, settings.Decl{Name: "clickhouse-url", Doc: "ClickHouse URL (native protocol)"})
	}
	if c.need&usesKafka != 0 {
		c.Stream.RegisterSettings(s)
	}
	if c.need&(usesSecretKey|usesDataDir) != 0 {
		s.String(&c.DataDir, DefaultDataDir, settings.Decl{Name: "data-dir",
			Doc: "the embedded broker's log, the generated secret key and other local state"})
	}
	if c.need&usesSecretKey != 0 {
		s.String(&c.SecretKey, "", settings.Decl{Name: "secret-key", Secret: true,
			Doc: "base64 of 32 bytes (openssl rand -base64 32): encrypts client signing secrets at rest; empty = a key generated into the data folder (api and retrier need the same key)"})
	}
}

// metricsSettings are those of a process without the API that serves /metrics.
type metricsSettings struct {
	Addr string
}

// RegisterSettings declares the metrics address.
func (c *metricsSettings) RegisterSettings(s *settings.Set) {
	s.String(&c.Addr, "", settings.Decl{Name: "metrics-addr",
		Doc: "consume, history, heartbeat, fanout, retrier, maintain, escalation, bridge: serve /metrics, /healthz and /readyz here (empty = not at all; api and all serve them on the HTTP address)"})
}

// shutdownSettings are how every daemon command (and `all`) stops: see runInOrder.
type shutdownSettings struct {
	Delay   time.Duration
	Timeout time.Duration
}

// The shutdown's defaults: the timeout and the delay together stay below
// Kubernetes' default grace period (30 s) and the manifests' (40 s).
const (
	DefaultShutdownDelay   = 5 * time.Second
	DefaultShutdownTimeout = 25 * time.Second
)

// RegisterSettings declares the shutdown delay and timeout.
func (c *shutdownSettings) RegisterSettings(s *settings.Set) {
	s.Duration(&c.Delay, DefaultShutdownDelay, settings.Decl{Name: "shutdown-delay",
		Doc: "on SIGTERM or SIGINT, /readyz answers 503 this long while everything still runs and serves, before the daemons stop (a second signal exits at once)"})
	s.Duration(&c.Timeout, DefaultShutdownTimeout, settings.Decl{Name: "shutdown-timeout",
		Doc: "after the shutdown delay, the daemons stop in reverse order of start within this long, else the process exits 1; keep delay + timeout below Kubernetes' terminationGracePeriodSeconds"})
}

// plan is the shutdown of a process whose readiness drain turns off.
func (c *shutdownSettings) plan(drain func()) (shutdown, error) {
	if c.Delay < 0 || c.Timeout <= 0 {
		return shutdown{}, fmt.Errorf("LOCKSTREAM_SHUTDOWN_DELAY (%v) must be 0 or more and LOCKSTREAM_SHUTDOWN_TIMEOUT (%v) more than 0",
			c.Delay, c.Timeout)
	}
	return shutdown{delay: c.Delay, timeout: c.Timeout, drain: drain}, nil
}

// statsSettings are `all`'s rates printer's.
type statsSettings struct {
	Interval time.Duration
}

// RegisterSettings declares the stats interval.
func (c *statsSettings) RegisterSettings(s *settings.Set) {
	s.Duration(&c.Interval, 0, settings.Decl{Name: "stats-interval",
		Doc: "all: print pipeline rates this often (0 = never; make demo uses 1s)"})
}

// sinkSettings are `webhook-sink`'s.
type sinkSettings struct {
	Addr     string
	Secret   string
	SMTPAddr string
}

// RegisterSettings declares the webhook sink's settings.
func (c *sinkSettings) RegisterSettings(s *settings.Set) {
	s.String(&c.Addr, "127.0.0.1:9999", settings.Decl{Name: "sink-addr", Doc: "webhook-sink: listen address"})
	s.String(&c.Secret, "", settings.Decl{Name: "sink-secret", Secret: true,
		Doc: "webhook-sink: the client secret that signs its webhooks"})
	s.String(&c.SMTPAddr, "", settings.Decl{Name: "sink-smtp-addr",
		Doc: "webhook-sink: also take email over SMTP here and print each message (empty = no mail sink)"})
}

// fakeSwrveSettings are `fake-swrve`'s.
type fakeSwrveSettings struct {
	Addr  string
	Scale float64
}

// RegisterSettings declares the fake Swrve's settings.
func (c *fakeSwrveSettings) RegisterSettings(s *settings.Set) {
	s.String(&c.Addr, "127.0.0.1:9998", settings.Decl{Name: "fake-swrve-addr", Doc: "fake-swrve: listen address"})
	s.Float(&c.Scale, swrvetest.DefaultScale, settings.Decl{Name: "fake-swrve-scale",
		Doc: "fake-swrve: multiplies Swrve's measured latencies (p50 983 ms)"})
}

// printFlags writes the help of every flag: a setting's with its environment
// variable and built-in default, and whether the variable is set (not its value:
// it may be a token); a command's own flag with its default.
func printFlags(w io.Writer, fs *flag.FlagSet, s *settings.Set) {
	fs.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(w, "  --%s\n    \t%s", f.Name, f.Usage)
		var notes []string
		if r, isSetting := s.Lookup(f.Name); isSetting {
			notes = append(notes, "env "+r.Variable)
			if r.Default != "" {
				notes = append(notes, fmt.Sprintf("default %q", r.Default))
			}
			if _, set := os.LookupEnv(r.Variable); set {
				notes = append(notes, r.Variable+" is set")
			}
		} else if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
			notes = append(notes, "default "+f.DefValue)
		}
		if len(notes) > 0 {
			fmt.Fprintf(w, " (%s)", strings.Join(notes, "; "))
		}
		fmt.Fprintln(w)
	})
}
