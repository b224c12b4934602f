package main

import (
	"flag"
	"fmt"
	"io"
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
// a subcommand lists the ones it uses. It is one long literal, a row a setting, so
// that the whole table reads in one place, as in DESIGN.md.
func settingTable() map[string]setting {
	return map[string]setting{
		"pg-url":    {"pg-url", "LOCKSTREAM_PG_URL", "postgres://lockstream:lockstream@127.0.0.1:5432/lockstream?sslmode=disable", "Postgres URL"},
		"redis-url": {"redis-url", "LOCKSTREAM_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis URL"},
		"redis-prefix": {"redis-prefix", "LOCKSTREAM_REDIS_PREFIX", "lockstream:",
			"prefix of every Redis key, so deployments can share a server"},
		"clickhouse-url": {"clickhouse-url", "LOCKSTREAM_CLICKHOUSE_URL", "clickhouse://127.0.0.1:9000/lockstream", "ClickHouse URL (native protocol)"},
		"kafka-brokers": {"kafka-brokers", "LOCKSTREAM_KAFKA_BROKERS", "",
			"comma-separated Kafka brokers; empty: all embeds a broker on 127.0.0.1:9092, bench one of its own, simulate uses a running all's"},
		"kafka-topic-prefix": {"kafka-topic-prefix", "LOCKSTREAM_KAFKA_TOPIC_PREFIX", "",
			"put before every topic name, so several deployments can share a cluster"},
		"kafka-partitions": {"kafka-partitions", "LOCKSTREAM_KAFKA_PARTITIONS", "12", "partitions of the topics lockstream creates"},
		"http-addr":        {"http-addr", "LOCKSTREAM_HTTP_ADDR", "127.0.0.1:8080", "HTTP API listen address"},
		"http-read-timeout": {"http-read-timeout", "LOCKSTREAM_HTTP_READ_TIMEOUT", "30s",
			"HTTP API: longest time to read a request, body included"},
		"http-write-timeout": {"http-write-timeout", "LOCKSTREAM_HTTP_WRITE_TIMEOUT", "30s",
			"HTTP API: longest time from a request's headers to the end of its answer (streaming routes lift it); handlers get two thirds of it"},
		"http-idle-timeout": {"http-idle-timeout", "LOCKSTREAM_HTTP_IDLE_TIMEOUT", "2m",
			"HTTP API: keep-alive connections idle for longer are closed"},
		"admin-token":  {"admin-token", "LOCKSTREAM_ADMIN_TOKEN", "", "bearer token of the admin API (required)"},
		"push-token":   {"push-token", "LOCKSTREAM_PUSH_TOKEN", "", "bearer token of the push API (POST /push, /v1/pushes); empty = push API off"},
		"ingest-token": {"ingest-token", "LOCKSTREAM_INGEST_TOKEN", "", "bearer token of POST /v1/readings"},
		"data-dir":     {"data-dir", "LOCKSTREAM_DATA_DIR", "./data", "the embedded broker's log, the generated secret key and other local state"},
		"secret-key": {"secret-key", "LOCKSTREAM_SECRET_KEY", "",
			"base64 of 32 bytes (openssl rand -base64 32): encrypts client signing secrets at rest; empty = a key generated into the data folder"},
		"secret-overlap": {"secret-overlap", "LOCKSTREAM_SECRET_OVERLAP", "24h",
			"how long a rotated-out client secret keeps signing webhooks alongside the new one"},
		"heartbeat-timeout": {"heartbeat-timeout", "LOCKSTREAM_HEARTBEAT_TIMEOUT", "1h",
			"silence after which a sensor's connection is lost"},
		"heartbeat-sweep-interval": {"heartbeat-sweep-interval", "LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL", "10s",
			"how often the heartbeat looks for silent sensors"},
		"site-outage-min": {"site-outage-min", "LOCKSTREAM_SITE_OUTAGE_MIN", "3",
			"sensors of a site (and at least half of it) lost within one heartbeat timeout that make one site_outage"},
		"flap-changes": {"flap-changes", "LOCKSTREAM_FLAP_CHANGES", "6",
			"a sensor with more changes than this within the flap window is unstable (sensor_unstable; its changes are held)"},
		"flap-window": {"flap-window", "LOCKSTREAM_FLAP_WINDOW", "1m",
			"the flapping window; an unstable sensor quiet this long is stable again (sensor_stable with its final state)"},
		"site-hold": {"site-hold", "LOCKSTREAM_SITE_HOLD", "0",
			"how long the loss of a sensor with a site waits after its deadline for the site to be judged; 0 = timeout/10 + 2 sweep intervals + 1s"},
		"new-member-window": {"new-member-window", "LOCKSTREAM_NEW_MEMBER_WINDOW", "24h",
			"how far back a new member's inbox is filled with the client's messages (at most 20)"},
		"retry-max-attempts": {"retry-max-attempts", "LOCKSTREAM_RETRY_MAX_ATTEMPTS", "10", "delivery attempts before GIVEN_UP"},
		"retry-backoff-base": {"retry-backoff-base", "LOCKSTREAM_RETRY_BACKOFF_BASE", "5m",
			"scale of the logarithmic back-off between delivery attempts"},
		"retry-lease": {"retry-lease", "LOCKSTREAM_RETRY_LEASE", "2m",
			"how long a claimed delivery stays IN_FLIGHT before another retrier may take it over (a crashed retrier's deliveries wait this long); a lease of 1m or less also shortens the attempt timeout (1m) to half of it"},
		"endpoint-disable-after": {"endpoint-disable-after", "LOCKSTREAM_ENDPOINT_DISABLE_AFTER", "120h",
			"a webhook endpoint whose every attempt failed for this long (with at least LOCKSTREAM_ENDPOINT_DISABLE_MIN_FAILURES failures) is disabled"},
		"endpoint-disable-min-failures": {"endpoint-disable-min-failures", "LOCKSTREAM_ENDPOINT_DISABLE_MIN_FAILURES", "10",
			"the fewest failed attempts that disable a webhook endpoint"},
		"fanout-writers": {"fanout-writers", "LOCKSTREAM_FANOUT_WRITERS", "1",
			"fan-out transactions written at once in this process (each partition always goes to the same one, which keeps its order)"},
		"retry-workers": {"retry-workers", "LOCKSTREAM_RETRY_WORKERS", "256",
			"webhook and email attempts in flight at once in this process (Swrve pushes have a pool of their own)"},
		"webhook-endpoint-concurrency": {"webhook-endpoint-concurrency", "LOCKSTREAM_WEBHOOK_ENDPOINT_CONCURRENCY", "64",
			"webhook requests in flight at once to one endpoint (scheme, host and port)"},
		"webhook-allow-private": {"webhook-allow-private", "LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE", "false",
			"let webhooks reach loopback and private addresses (tests, demo)"},
		"swrve-url":       {"swrve-url", "LOCKSTREAM_SWRVE_URL", "https://service.swrve.com/push", "Swrve push API URL"},
		"swrve-rate":      {"swrve-rate", "LOCKSTREAM_SWRVE_RATE", "300", "Swrve sends started per second at most, by every retrier process together (shared through Redis)"},
		"swrve-push-keys": {"swrve-push-keys", "LOCKSTREAM_SWRVE_PUSH_KEYS", "", "YAML file mapping message prototypes to push keys"},
		"smtp-url":        {"smtp-url", "LOCKSTREAM_SMTP_URL", "smtp://127.0.0.1:25", "SMTP server URL"},
		"retention": {"retention", "LOCKSTREAM_RETENTION", "90d",
			"maintain: drop whole month partitions of the outbox (and inbox) ended longer ago than this (days: 90d, or a duration)"},
		"history-retention": {"history-retention", "LOCKSTREAM_HISTORY_RETENTION", "0",
			"maintain: drop ClickHouse history months ended longer ago than this (0 = keep forever)"},
		"maintain-interval": {"maintain-interval", "LOCKSTREAM_MAINTAIN_INTERVAL", "1h",
			"maintain: how often partitions are made ahead and old ones dropped"},
		"escalation-interval": {"escalation-interval", "LOCKSTREAM_ESCALATION_INTERVAL", "10s",
			"escalation: how often a round escalates unseen messages"},
		"escalate-email-after": {"escalate-email-after", "LOCKSTREAM_ESCALATE_EMAIL_AFTER", "15m",
			"escalation: an episode left unseen this long gets its email (a quarter of it after a critical message)"},
		"escalate-push-after": {"escalate-push-after", "LOCKSTREAM_ESCALATE_PUSH_AFTER", "2m",
			"escalation: an episode left unseen this long gets its push (a quarter of it after a critical message)"},
		"escalation-limit": {"escalation-limit", "LOCKSTREAM_ESCALATION_LIMIT", "20000",
			"escalation: due episodes (and digest members) one round handles at most; a full round is followed by another at once"},
		"log-level": {"log-level", "LOCKSTREAM_LOG_LEVEL", "info", "debug, info, warn or error"},
		"metrics-addr": {"metrics-addr", "LOCKSTREAM_METRICS_ADDR", "",
			"consume, history, heartbeat: serve /metrics here (empty = not at all; api and all serve it on the HTTP address)"},
		"shutdown-delay": {"shutdown-delay", "LOCKSTREAM_SHUTDOWN_DELAY", "5s",
			"on SIGTERM or SIGINT, /readyz answers 503 this long while everything still runs and serves, before the daemons stop"},
		"shutdown-timeout": {"shutdown-timeout", "LOCKSTREAM_SHUTDOWN_TIMEOUT", "25s",
			"after the shutdown delay, the daemons stop in reverse order of start within this long (else the process exits 1); keep delay + timeout below Kubernetes' terminationGracePeriodSeconds"},
		"stats-interval": {"stats-interval", "LOCKSTREAM_STATS_INTERVAL", "0",
			"all: print pipeline rates this often (0 = never; make demo uses 1s)"},
		"amqp-url": {"amqp-url", "LOCKSTREAM_AMQP_URL", "",
			"AMQP broker (RabbitMQ) of the bridge, e.g. amqp://guest:guest@127.0.0.1:5672/; empty = no AMQP bridge"},
		"amqp-exchange": {"amqp-exchange", "LOCKSTREAM_AMQP_EXCHANGE", "lockstream", "durable topic exchange the AMQP bridge binds to and publishes to"},
		"amqp-queue": {"amqp-queue", "LOCKSTREAM_AMQP_QUEUE", "lockstream.events-recorder",
			"durable queue (quorum when new and supported) the AMQP bridges share, bound to events.*.update.*"},
		"amqp-prefetch": {"amqp-prefetch", "LOCKSTREAM_AMQP_PREFETCH", "1000", "unacknowledged AMQP messages a bridge holds at most"},
		"amqp-publish-events": {"amqp-publish-events", "LOCKSTREAM_AMQP_PUBLISH_EVENTS", "false",
			"also publish every event of lockstream.events to the exchange as events.sensor.update.<type>, with publisher confirms"},
		"mqtt-url": {"mqtt-url", "LOCKSTREAM_MQTT_URL", "", "MQTT broker (Mosquitto) of the bridge, e.g. mqtt://127.0.0.1:1883; empty = no MQTT bridge"},
		"mqtt-topic": {"mqtt-topic", "LOCKSTREAM_MQTT_TOPIC", "lockstream/readings/+",
			"topic filter of readings (shared subscription $share/lockstream/<filter>); the last level is the sensor id"},
		"mqtt-client-id": {"mqtt-client-id", "LOCKSTREAM_MQTT_CLIENT_ID", "",
			"MQTT client id of the bridge's persistent session: stable across restarts, one per bridge (empty = lockstream-<host name>)"},
		"mqtt-inflight": {"mqtt-inflight", "LOCKSTREAM_MQTT_INFLIGHT", "256",
			"unacknowledged MQTT messages a bridge holds at most (Receive Maximum); keep it below the broker's queue limit"},
		"alert-email": {"alert-email", "LOCKSTREAM_ALERT_EMAIL", "",
			"address mailed (through LOCKSTREAM_SMTP_URL) about unrecoverable AMQP messages, at most once a minute; empty = none"},
		"fake-swrve-addr":  {"fake-swrve-addr", "LOCKSTREAM_FAKE_SWRVE_ADDR", "127.0.0.1:9998", "fake-swrve: listen address"},
		"fake-swrve-scale": {"fake-swrve-scale", "LOCKSTREAM_FAKE_SWRVE_SCALE", "1", "fake-swrve: multiplies Swrve's measured latencies (p50 983 ms)"},
		"sink-addr":        {"sink-addr", "LOCKSTREAM_SINK_ADDR", "127.0.0.1:9999", "webhook-sink: listen address"},
		"sink-secret":      {"sink-secret", "LOCKSTREAM_SINK_SECRET", "", "webhook-sink: the client secret that signs its webhooks"},
		"sink-smtp-addr": {"sink-smtp-addr", "LOCKSTREAM_SINK_SMTP_ADDR", "",
			"webhook-sink: also take email over SMTP here and print each message (empty = no mail sink)"},
	}
}

// values holds a subcommand's parsed settings by flag name, and its arguments.
type values struct {
	fs    *flag.FlagSet
	m     map[string]*string
	table map[string]setting
	// args are the command's arguments, the flags taken out.
	args []string
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
		v.m[name] = fs.String(s.flag, def, s.usage)
	}
	return v
}

// printFlags writes the help of every flag: a setting's with its environment
// variable and built-in default, each once, and whether the variable is set (not
// its value: it may be a token); a command's own flag with its default.
func (v *values) printFlags(w io.Writer) {
	v.fs.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(w, "  --%s\n    \t%s", f.Name, f.Usage)
		s, isSetting := v.table[f.Name]
		var notes []string
		switch {
		case isSetting:
			notes = append(notes, "env "+s.env)
			if s.def != "" {
				notes = append(notes, fmt.Sprintf("default %q", s.def))
			}
			if _, set := os.LookupEnv(s.env); set {
				notes = append(notes, s.env+" is set")
			}
		case f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false":
			notes = append(notes, "default "+f.DefValue)
		}
		if len(notes) > 0 {
			fmt.Fprintf(w, " (%s)", strings.Join(notes, "; "))
		}
		fmt.Fprintln(w)
	})
}

func (v *values) str(name string) string {
	p, ok := v.m[name]
	if !ok {
		panic("setting not registered: " + name)
	}
	return strings.TrimSpace(*p)
}

// set replaces a setting's value (a command that runs daemons on settings of
// its own: `bench pipeline`).
func (v *values) set(name, value string) {
	p, ok := v.m[name]
	if !ok {
		panic("setting not registered: " + name)
	}
	*p = value
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
