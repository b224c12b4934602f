package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// setting is one configuration value: read from its environment variable, overridable
// by its flag, with a documented default.
type setting struct {
	flag  string
	env   string
	def   string
	usage string
}

// settingTable returns every value of DESIGN.md's configuration table, by flag name;
// a subcommand lists the ones it uses.
func settingTable() map[string]setting {
	return map[string]setting{
		"pg-url":    {"pg-url", "LOCKSTREAM_PG_URL", "postgres://lockstream:lockstream@127.0.0.1:5432/lockstream?sslmode=disable", "Postgres URL"},
		"redis-url": {"redis-url", "LOCKSTREAM_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis URL"},
		"redis-prefix": {"redis-prefix", "LOCKSTREAM_REDIS_PREFIX", "lockstream:",
			"prefix of every Redis key, so deployments can share a server"},
		"clickhouse-url": {"clickhouse-url", "LOCKSTREAM_CLICKHOUSE_URL", "clickhouse://127.0.0.1:9000/lockstream", "ClickHouse URL (native protocol)"},
		"kafka-brokers": {"kafka-brokers", "LOCKSTREAM_KAFKA_BROKERS", "",
			"comma-separated Kafka brokers; empty = embedded broker on 127.0.0.1:9092 (all only)"},
		"kafka-topic-prefix": {"kafka-topic-prefix", "LOCKSTREAM_KAFKA_TOPIC_PREFIX", "",
			"put before every topic name, so several deployments can share a cluster"},
		"kafka-partitions": {"kafka-partitions", "LOCKSTREAM_KAFKA_PARTITIONS", "12", "partitions of the topics lockstream creates"},
		"http-addr":        {"http-addr", "LOCKSTREAM_HTTP_ADDR", "127.0.0.1:8080", "HTTP API listen address"},
		"admin-token":      {"admin-token", "LOCKSTREAM_ADMIN_TOKEN", "", "bearer token of the admin API (required)"},
		"push-token":       {"push-token", "LOCKSTREAM_PUSH_TOKEN", "", "bearer token of the push API (POST /push, /v1/pushes); empty = push API off"},
		"ingest-token":     {"ingest-token", "LOCKSTREAM_INGEST_TOKEN", "", "bearer token of POST /v1/readings"},
		"data-dir":         {"data-dir", "LOCKSTREAM_DATA_DIR", "./data", "the embedded broker's log and other local state"},
		"heartbeat-timeout": {"heartbeat-timeout", "LOCKSTREAM_HEARTBEAT_TIMEOUT", "1h",
			"silence after which a sensor's connection is lost"},
		"heartbeat-sweep-interval": {"heartbeat-sweep-interval", "LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL", "10s",
			"how often the heartbeat looks for silent sensors"},
		"new-member-window": {"new-member-window", "LOCKSTREAM_NEW_MEMBER_WINDOW", "24h",
			"how far back a new member's inbox is filled with the client's messages (at most 20)"},
		"retry-max-attempts": {"retry-max-attempts", "LOCKSTREAM_RETRY_MAX_ATTEMPTS", "10", "delivery attempts before GIVEN_UP"},
		"retry-backoff-base": {"retry-backoff-base", "LOCKSTREAM_RETRY_BACKOFF_BASE", "5m",
			"scale of the logarithmic back-off between delivery attempts"},
		"retry-lease": {"retry-lease", "LOCKSTREAM_RETRY_LEASE", "2m",
			"how long a claimed delivery stays IN_FLIGHT before another retrier may take it over (a crashed retrier's deliveries wait this long); a lease of 1m or less also shortens the attempt timeout (1m) to half of it"},
		"webhook-allow-private": {"webhook-allow-private", "LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE", "false",
			"let webhooks reach loopback and private addresses (tests, demo)"},
		"swrve-url":       {"swrve-url", "LOCKSTREAM_SWRVE_URL", "https://service.swrve.com/push", "Swrve push API URL"},
		"swrve-rate":      {"swrve-rate", "LOCKSTREAM_SWRVE_RATE", "300", "Swrve sends started per second at most"},
		"swrve-push-keys": {"swrve-push-keys", "LOCKSTREAM_SWRVE_PUSH_KEYS", "", "YAML file mapping message prototypes to push keys"},
		"smtp-url":        {"smtp-url", "LOCKSTREAM_SMTP_URL", "smtp://127.0.0.1:25", "SMTP server URL"},
		"log-level":       {"log-level", "LOCKSTREAM_LOG_LEVEL", "info", "debug, info, warn or error"},
		"metrics-addr": {"metrics-addr", "LOCKSTREAM_METRICS_ADDR", "",
			"consume, history, heartbeat: serve /metrics here (empty = not at all; api and all serve it on the HTTP address)"},
		"stats-interval": {"stats-interval", "LOCKSTREAM_STATS_INTERVAL", "0",
			"all: print pipeline rates this often (0 = never; make demo uses 1s)"},
		"fake-swrve-addr":  {"fake-swrve-addr", "LOCKSTREAM_FAKE_SWRVE_ADDR", "127.0.0.1:9998", "fake-swrve: listen address"},
		"fake-swrve-scale": {"fake-swrve-scale", "LOCKSTREAM_FAKE_SWRVE_SCALE", "1", "fake-swrve: multiplies Swrve's measured latencies (p50 983 ms)"},
		"sink-addr":        {"sink-addr", "LOCKSTREAM_SINK_ADDR", "127.0.0.1:9999", "webhook-sink: listen address"},
		"sink-secret":      {"sink-secret", "LOCKSTREAM_SINK_SECRET", "", "webhook-sink: the client secret that signs its webhooks"},
	}
}

// values holds a subcommand's parsed settings by flag name.
type values struct {
	fs    *flag.FlagSet
	m     map[string]*string
	table map[string]setting
}

// newFlagSet registers the named settings on a flag set whose defaults come from the
// environment, so a flag overrides its variable, which overrides the built-in default.
func newFlagSet(cmd string, names []string) *values {
	fs := flag.NewFlagSet("lockstream "+cmd, flag.ContinueOnError)
	v := &values{fs: fs, m: map[string]*string{}, table: settingTable()}
	for _, name := range names {
		if _, seen := v.m[name]; seen {
			continue
		}
		s, ok := v.table[name]
		if !ok {
			panic("unknown setting " + name) // a programming error in the command table
		}
		def := s.def
		if env, ok := os.LookupEnv(s.env); ok {
			def = env
		}
		v.m[name] = fs.String(s.flag, def, fmt.Sprintf("%s (env %s, default %q)", s.usage, s.env, s.def))
	}
	return v
}

func (v *values) str(name string) string {
	p, ok := v.m[name]
	if !ok {
		panic("setting not registered: " + name)
	}
	return strings.TrimSpace(*p)
}

func (v *values) duration(name string) (time.Duration, error) {
	d, err := time.ParseDuration(v.str(name))
	if err != nil {
		return 0, fmt.Errorf("%s / --%s: %w", v.table[name].env, name, err)
	}
	return d, nil
}

func (v *values) int(name string) (int, error) {
	var n int
	if _, err := fmt.Sscan(v.str(name), &n); err != nil {
		return 0, fmt.Errorf("%s / --%s: not a whole number: %q", v.table[name].env, name, v.str(name))
	}
	return n, nil
}

func (v *values) float(name string) (float64, error) {
	f, err := strconv.ParseFloat(v.str(name), 64)
	if err != nil {
		return 0, fmt.Errorf("%s / --%s: not a number: %q", v.table[name].env, name, v.str(name))
	}
	return f, nil
}

func (v *values) bool(name string) (bool, error) {
	switch strings.ToLower(v.str(name)) {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no", "":
		return false, nil
	}
	return false, fmt.Errorf("%s / --%s: want true or false, got %q", v.table[name].env, name, v.str(name))
}

func (v *values) list(name string) []string {
	var out []string
	for _, part := range strings.Split(v.str(name), ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// daemonSettingNames returns, sorted, every setting a daemon may read: all of them but
// the demo tools' (webhook-sink, fake-swrve).
func daemonSettingNames() []string {
	table := settingTable()
	names := make([]string, 0, len(table))
	for n := range table {
		if !strings.HasPrefix(n, "sink-") && !strings.HasPrefix(n, "fake-swrve-") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}
