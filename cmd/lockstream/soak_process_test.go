package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/bridge/bridgetest"
	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/internal/servicetest"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// The chaos soak (TestChaosSoak; `make soak` runs it for 10 minutes, `make
// test` for 90 seconds) runs the production topology of deploy/k8s as
// separate processes on loopback while a fleet publishes over Kafka, HTTP,
// MQTT and AMQP with bad input mixed in, members read their inboxes, pushes
// are posted, and a driver kills, stops and restarts processes and restarts
// the services — private instances of the soak's own — once each; then it
// waits for quiescence and checks every promise of DESIGN.md "Chaos soak". The figures it prints are those of
// bench/RESULTS.md "Chaos soak".

// soakTopology is the process count of each subcommand: deploy/k8s's replicas.
var soakTopology = []struct {
	sub   string
	count int
}{
	{"api", 2}, {"consume", 3}, {"history", 2}, {"heartbeat", 2}, {"fanout", 2},
	{"retrier", 2}, {"escalation", 2}, {"maintain", 1}, {"bridge", 2},
}

// soakConfig sizes a soak run.
type soakConfig struct {
	duration   time.Duration // of the chaos
	perChannel int           // sensors per intake (Kafka, HTTP, MQTT, AMQP)
	seed       uint64
	// timeout is the heartbeat timeout; a silence lasts silence, one every
	// silencePeriod, for the silent sensors.
	timeout, silence, silencePeriod time.Duration
	faultEvery                      time.Duration
	swrveRate                       int
}

// soakConfigFromEnv reads SOAK_DURATION (default 90s) and SOAK_SEED (default:
// the clock); longer runs get a larger fleet.
func soakConfigFromEnv(t *testing.T) soakConfig {
	t.Helper()
	c := soakConfig{duration: 90 * time.Second, perChannel: 8, timeout: 20 * time.Second,
		silence: 35 * time.Second, silencePeriod: 80 * time.Second, faultEvery: 4 * time.Second, swrveRate: 20,
		seed: uint64(time.Now().UnixNano())}
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 30*time.Second {
			t.Fatalf("SOAK_DURATION=%q: want a duration of at least 30s (%v)", v, err)
		}
		c.duration = d
	}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: %v", v, err)
		}
		c.seed = s
	}
	if c.duration > 5*time.Minute {
		c.perChannel = 16
	}
	return c
}

// soakProc is one slot of the topology: the process now running in it.
type soakProc struct {
	name  string
	args  []string
	ready string // URL of its /readyz
	group string // its Kafka consumer group, if any
	p     *proc
}

// soakNode is the soak's processes, its private servers, its stores on them,
// and its broker.
type soakNode struct {
	t         *testing.T
	cfg       soakConfig
	h         *harness
	stores    *storagetest.Stores
	kafka     stream.Config
	admin     *kgo.Client
	apis      []string
	procs     []*soakProc
	rabbit    *bridgetest.Node
	mosquitto *servicetest.Mosquitto
	// services are the private servers the driver restarts, in its order.
	services []soakService
	names    bridgeNames
	// held keeps each address slot picked listened on until every process's
	// is picked, so no two processes get the same port (a port closed right
	// away may be handed out again).
	held []net.Listener
}

// soakService is a private server and its restart.
type soakService struct {
	name    string
	restart func()
}

func TestChaosSoak(t *testing.T) {
	cfg := soakConfigFromEnv(t)
	t.Logf("chaos soak: %v of chaos, %d sensors per intake, seed %d (SOAK_SEED to repeat)", cfg.duration, cfg.perChannel, cfg.seed)
	sinks := startSoakSinks(t, cfg.swrveRate)
	n := startSoakNode(t, cfg, sinks)
	fleet := newSoakFleet(n, cfg, sinks)
	fleet.setUp()

	chaos, endChaos := context.WithCancel(context.Background())
	defer endChaos()
	started := time.Now()
	fleet.run(chaos, started)
	faults := n.chaos()
	endChaos()
	t.Logf("chaos over after %v: %s", time.Since(started).Round(time.Second), faults)

	final := n.quiesce(fleet)
	t.Logf("quiescent %v after the chaos ended", time.Since(started.Add(n.cfg.duration)).Round(time.Second))
	r := n.check(fleet, sinks, final, faults.outages)
	r.add("faults: %s", faults)
	t.Logf("chaos soak figures (%v of chaos, seed %d):\n%s", cfg.duration, cfg.seed, r)
}

// startSoakNode starts the private servers, creates the stores on them and
// the broker, and starts every process of the topology, then waits until all
// are ready.
func startSoakNode(t *testing.T, cfg soakConfig, sinks *soakSinks) *soakNode {
	t.Helper()
	// Private instances, which the driver restarts for real: the shared ones
	// serve every other test and engineer on the machine. ClickHouse stays
	// shared (a database of the soak's own) and Kafka is kfake in this process.
	pg, redis := servicetest.StartPostgres(t), servicetest.StartRedis(t)
	n := &soakNode{t: t, cfg: cfg, mosquitto: servicetest.StartMosquitto(t), rabbit: bridgetest.StartNode(t)}
	n.services = []soakService{{"postgres", pg.Restart}, {"redis", redis.Restart},
		{"rabbitmq", n.rabbit.Restart}, {"mosquitto", n.mosquitto.Restart}}
	n.stores = storagetest.NewOn(t, storagetest.Servers{PostgresURL: pg.URL, RedisURL: redis.URL})
	n.kafka = privateKafka(t)
	n.admin = streamtest.Client(t, n.kafka)
	bridgeSettings, names := soakBridgeEnv(t, n.rabbit.URL, n.mosquitto.URL)
	n.names = names

	stores, kafka := n.stores, n.kafka
	env := append(storeSettings(kafka, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL, stores.RedisPrefix), bridgeSettings...)
	env = append(env,
		"LOCKSTREAM_ADMIN_TOKEN="+deliveryAdminToken,
		"LOCKSTREAM_INGEST_TOKEN="+deliveryIngestToken,
		"LOCKSTREAM_PUSH_TOKEN="+pushToken,
		"LOCKSTREAM_DATA_DIR="+t.TempDir(),
		"LOCKSTREAM_HEARTBEAT_TIMEOUT="+cfg.timeout.String(),
		"LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL=1s",
		"LOCKSTREAM_FLAP_CHANGES=1000", // random flips are not what the flapping judgement is for
		"LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true",
		"LOCKSTREAM_SMTP_URL=smtp://"+sinks.mail.addr,
		"LOCKSTREAM_SWRVE_URL="+sinks.swrveURL+"/push",
		"LOCKSTREAM_SWRVE_PUSH_KEYS="+soakPushKeys(t),
		"LOCKSTREAM_SWRVE_RATE="+strconv.Itoa(cfg.swrveRate),
		"LOCKSTREAM_RETRY_BACKOFF_BASE=200ms",
		// A killed retrier's deliveries come back after the lease; a stopped
		// one (at most 4 s) keeps its own.
		"LOCKSTREAM_RETRY_LEASE=10s",
		"LOCKSTREAM_ESCALATION_INTERVAL=1s",
		"LOCKSTREAM_ESCALATE_EMAIL_AFTER=8s",
		"LOCKSTREAM_ESCALATE_PUSH_AFTER=8s",
		"LOCKSTREAM_LOG_LEVEL=warn",
	)
	n.h = newHarness(t, env...)
	for _, slot := range soakTopology {
		for i := range slot.count {
			n.procs = append(n.procs, n.slot(slot.sub, i))
		}
	}
	for _, ln := range n.held {
		_ = ln.Close()
	}
	n.held = nil
	for _, sp := range n.procs {
		sp.p = n.h.start(sp.name, sp.args...)
	}
	n.h.waitFor("every process of the topology to be ready", n.allReady)
	return n
}

// slot describes the i-th process of subcommand sub: its own address, and for
// a bridge its own MQTT session.
func (n *soakNode) slot(sub string, i int) *soakProc {
	sp := &soakProc{name: fmt.Sprintf("%s-%d", sub, i+1), args: []string{sub}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		n.t.Fatal(err)
	}
	n.held = append(n.held, ln)
	addr := ln.Addr().String()
	handedOut.Store(addr, true) // nor to another test's freeAddr
	if sub == "api" {
		sp.args = append(sp.args, "--http-addr="+addr)
		n.apis = append(n.apis, "http://"+addr)
	} else {
		sp.args = append(sp.args, "--metrics-addr="+addr)
	}
	sp.ready = "http://" + addr + "/readyz"
	switch sub {
	case "consume":
		sp.group = consumer.DefaultGroup
	case "history":
		sp.group = history.DefaultGroup
	case "fanout":
		sp.group = fanout.DefaultGroup
	case "bridge":
		// Its session dies with the private Mosquitto at the test's end.
		sp.args = append(sp.args, fmt.Sprintf("--mqtt-client-id=%s-%d", n.names.clientID, i+1))
	}
	return sp
}

// soakPushKeys writes the push keys file: the standalone pushes' prototype,
// the escalation's and the incident reminders'.
func soakPushKeys(t *testing.T) string {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "pushkeys.yaml")
	yaml := fmt.Sprintf("swrve:\n  messagePrototypePushKeys:\n    %q:\n      IOS: %s\n      ANDROID: %s\n"+
		"    'sensor.unseen':\n      IOS: campaign-unseen-ios\n      ANDROID: campaign-unseen-android\n"+
		"    'incident.reminder':\n      IOS: campaign-incident-ios\n      ANDROID: campaign-incident-android\n",
		pushPrototype, iosCampaign, androidCampaign)
	if err := os.WriteFile(keys, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return keys
}

// allReady reports whether every process answers /readyz with 200.
func (n *soakNode) allReady() (bool, string) {
	client := &http.Client{Timeout: 5 * time.Second}
	for _, sp := range n.procs {
		resp, err := client.Get(sp.ready)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", sp.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Sprintf("%s: readyz %s", sp.name, resp.Status)
		}
	}
	return true, ""
}

// faultCounts is what the driver did.
type faultCounts struct {
	kills, stops int
	startExits   int                      // processes that exited at start, a store being unreachable
	restarts     []string                 // the services restarted: when, and how long until they answered again
	outages      map[string]time.Duration // by service: how long until it answered again
	byProcess    map[string]int
}

func (f faultCounts) String() string {
	return fmt.Sprintf("%d SIGKILLs and restarts, %d SIGSTOP/SIGCONTs, services restarted: %s; "+
		"%d processes exited at start with a store unreachable and were started again; faults per process %v",
		f.kills, f.stops, strings.Join(f.restarts, ", "), f.startExits, f.byProcess)
}

// chaos runs the driver on the test's goroutine for the configured duration:
// every faultEvery a SIGKILL (then a restart) or a SIGSTOP (1–4 s, then
// SIGCONT) of a random process, and each private service restarted once at
// its own moment (the driver waits for it: nothing else is done meanwhile).
// Between faults it fails the test if a process exited unasked.
func (n *soakNode) chaos() faultCounts {
	rng := rand.New(rand.NewPCG(n.cfg.seed, 1))
	f := faultCounts{byProcess: map[string]int{}, outages: map[string]time.Duration{}}
	// The chaos ends when end fires; the services are restarted at the 2nd,
	// 4th, 6th and 8th eleventh of it (18 %, 36 %, 55 %, 73 % of the way),
	// each timed from the start, since a restart takes seconds.
	started := time.Now()
	end := time.NewTimer(n.cfg.duration)
	defer end.Stop()
	tick := time.NewTicker(200 * time.Millisecond) // the driver's supervision
	defer tick.Stop()
	faults := time.NewTicker(n.cfg.faultEvery)
	defer faults.Stop()
	restartAt := func(i int) time.Duration { return time.Duration(2*i+2) * (n.cfg.duration / 11) }
	restart := time.NewTimer(restartAt(0))
	defer restart.Stop()
	restarted := 0
	for {
		select {
		case <-end.C:
			if restarted < len(n.services) {
				n.t.Fatalf("the chaos ended with %d of the %d services restarted", restarted, len(n.services))
			}
			return f
		case <-tick.C:
			n.supervise(&f)
		case <-restart.C:
			svc := n.services[restarted]
			at := time.Now()
			svc.restart()
			f.outages[svc.name] = time.Since(at)
			f.restarts = append(f.restarts, fmt.Sprintf("%s at %v (back after %v)", svc.name,
				at.Sub(started).Round(time.Second), f.outages[svc.name].Round(100*time.Millisecond)))
			if restarted++; restarted < len(n.services) {
				restart.Reset(max(0, time.Until(started.Add(restartAt(restarted)))))
			}
		case <-faults.C:
			sp := n.procs[rng.IntN(len(n.procs))]
			f.byProcess[sp.name]++
			if rng.IntN(2) == 0 {
				n.killAndRestart(sp)
				f.kills++
			} else {
				n.pause(sp, time.Second+time.Duration(rng.Int64N(int64(3*time.Second))))
				f.stops++
			}
		}
	}
}

// supervise restarts a process that exited unasked because a store could not
// be reached as it started — the exit DESIGN.md "Process lifecycle" makes, for
// the supervisor (k8s) to start it again — and fails the test for any other
// exit: a running daemon rides out its stores' outages.
func (n *soakNode) supervise(f *faultCounts) {
	n.t.Helper()
	for _, sp := range n.procs {
		if sp.p.running() || sp.p.stopping.Load() {
			continue
		}
		out := sp.p.out.String()
		last := out[strings.LastIndex(strings.TrimRight(out, "\n"), "\n")+1:]
		if !strings.Contains(last, `msg="stopped with an error"`) || !strings.Contains(last, `err="connecting to `) {
			n.t.Fatalf("%s exited unasked (status %d):\n%s", sp.name, sp.p.cmd.ProcessState.ExitCode(), tail(out, 4000))
		}
		f.startExits++
		sp.p.stopping.Store(true) // seen: the harness's checks need not fail on it
		sp.p = n.h.start(sp.name, sp.args...)
	}
}

// killAndRestart SIGKILLs the slot's process and starts a new one in its
// place. A killed group member never leaves its group; the soak evicts the
// group's members as the coordinator does once the session timeout (45 s)
// passes, so that a 90-second soak does not spend its time waiting for it.
func (n *soakNode) killAndRestart(sp *soakProc) {
	n.t.Helper()
	sp.p.kill()
	if sp.group != "" {
		evictMembers(n.t, n.admin, sp.group)
	}
	sp.p = n.h.start(sp.name, sp.args...)
}

// pause stops the slot's process with SIGSTOP for d, then continues it.
func (n *soakNode) pause(sp *soakProc, d time.Duration) {
	n.t.Helper()
	if err := sp.p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		n.t.Fatalf("SIGSTOP %s: %v", sp.name, err)
	}
	time.Sleep(d) // the length of the fault itself
	if err := sp.p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		n.t.Fatalf("SIGCONT %s: %v", sp.name, err)
	}
}

// soakBridgeEnv is the bridges' settings on the soak's private brokers: the
// bridges declare the exchange and queue themselves (durable, so they outlive
// the broker's restart), and everything goes with the brokers at the end.
func soakBridgeEnv(t *testing.T, amqpURL, mqttURL string) ([]string, bridgeNames) {
	t.Helper()
	suffix := bridgetest.Suffix(t)
	n := bridgeNames{exchange: "soak." + suffix, queue: "soak.recorder." + suffix,
		topicPrefix: "soak/" + suffix + "/readings/", clientID: "soak-bridge-" + suffix}
	return []string{
		"LOCKSTREAM_AMQP_URL=" + amqpURL,
		"LOCKSTREAM_AMQP_EXCHANGE=" + n.exchange,
		"LOCKSTREAM_AMQP_QUEUE=" + n.queue,
		"LOCKSTREAM_MQTT_URL=" + mqttURL,
		"LOCKSTREAM_MQTT_TOPIC=" + n.topicPrefix + "+",
		"LOCKSTREAM_MQTT_CLIENT_ID=" + n.clientID,
	}, n
}
