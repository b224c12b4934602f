package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/bridge/amqp"
	"github.com/lockstream/lockstream/bridge/bridgetest"
	"github.com/lockstream/lockstream/bridge/mqtt"
	"github.com/lockstream/lockstream/stream"
)

// bridgeBenchWait bounds one bridge benchmark's wait for its readings.
const bridgeBenchWait = 10 * time.Minute

// BenchmarkAMQPBridge measures readings per second through the AMQP bridge into
// Kafka: b.N readings wait in a fresh quorum queue of the local RabbitMQ (one per
// message, or 100 per message as a JSON array), then a bridge starts and the
// clock runs until Kafka (an embedded broker, as `lockstream all` starts it)
// acknowledged every one. The bridge's prefetch is its default (1,000) unless
// LOCKSTREAM_BENCH_AMQP_PREFETCH says otherwise.
//
//	go test -run '^$' -bench AMQPBridge -benchtime 200000x -timeout 30m ./bench/
func BenchmarkAMQPBridge(b *testing.B) {
	for _, perMessage := range []int{1, 100} {
		b.Run(fmt.Sprintf("readings_per_message=%d", perMessage), func(b *testing.B) {
			benchAMQP(b, perMessage)
		})
	}
}

func benchAMQP(b *testing.B, perMessage int) {
	ctx := context.Background()
	kafka := benchKafka(b)
	broker := bridgetest.DialAMQP(b)
	suffix := bridgetest.Suffix(b)
	cfg := amqp.Config{URL: broker.URL, Exchange: "lsbench." + suffix, Queue: "lsbench.recorder." + suffix,
		ConnectionName: "lockstream bench " + suffix, Prefetch: envInt(b, "LOCKSTREAM_BENCH_AMQP_PREFETCH", 0), Stream: kafka}
	broker.Exchange(cfg.Exchange)
	broker.DeleteQueueAtEnd(cfg.Queue)
	// A first bridge declares the queue (a quorum queue) and binding, then stops.
	stop, _ := runAMQPBridge(b, cfg)
	stop()

	b.StopTimer()
	readings := b.N
	messages := publishAMQPReadings(b, broker, cfg.Exchange, readings, perMessage)
	before, start := bridgeCPU(), time.Now()
	b.StartTimer()
	stop, reg := runAMQPBridge(b, cfg)
	waitProduced(b, newProgress(b, reg, "lockstream_amqp", readings, nil))
	b.StopTimer()
	wall, after := time.Since(start), bridgeCPU()
	stop()
	_ = ctx
	b.Logf("%d readings in %d messages: wall %.2fs; cpu: this process %.2fs, rabbitmq %.2fs, kafka is in-process",
		readings, messages, wall.Seconds(), after.self-before.self, after.rabbitmq-before.rabbitmq)
	b.ReportMetric(float64(readings)/wall.Seconds(), "readings/s")
	b.ReportMetric(float64(messages)/wall.Seconds(), "messages/s")
}

// publishAMQPReadings publishes n readings of 10,000 sensors, perMessage to a
// message, with publisher confirms in windows of 1,000, and returns the message
// count.
func publishAMQPReadings(b *testing.B, broker *bridgetest.AMQP, exchange string, n, perMessage int) int {
	ch := broker.Channel()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var window []*amqp091.DeferredConfirmation
	flush := func() {
		for _, c := range window {
			if ok, err := c.WaitContext(ctx); err != nil || !ok {
				b.Fatalf("publish not confirmed: %v %v", ok, err)
			}
		}
		window = window[:0]
	}
	messages := 0
	var body bytes.Buffer
	for i := 0; i < n; {
		body.Reset()
		if perMessage > 1 {
			body.WriteByte('[')
		}
		for j := 0; j < perMessage && i < n; j, i = j+1, i+1 {
			if j > 0 {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"sensor_id":"b%d","data":%d}`, i%10_000, (i/10_000)%2)
		}
		if perMessage > 1 {
			body.WriteByte(']')
		}
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, "events.sensor.update.reading", false, false,
			amqp091.Publishing{ContentType: "application/json", DeliveryMode: amqp091.Persistent, Body: bytes.Clone(body.Bytes())})
		if err != nil {
			b.Fatal(err)
		}
		window = append(window, c)
		messages++
		if len(window) == 1000 {
			flush()
		}
	}
	flush()
	return messages
}

func runAMQPBridge(b *testing.B, cfg amqp.Config) (stop func(), reg *prometheus.Registry) {
	reg = prometheus.NewRegistry()
	br, err := amqp.New(cfg, nil, nil, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	bridgetest.WaitFor(b, time.Minute, "the AMQP bridge to consume", func() (bool, string) {
		return bridgetest.Value(b, reg, "lockstream_amqp_connected") == 1, "not yet"
	})
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}, reg
}

// BenchmarkMQTTBridge measures readings per second through the MQTT bridge into
// Kafka (an embedded broker): b.N bare 0/1 readings of 10,000 sensors, published
// to the local Mosquitto at QoS 1 by 4 connections (20 in flight each, Mosquitto's
// default Receive Maximum). LOCKSTREAM_BENCH_MQTT_INFLIGHT sets the bridge's own
// Receive Maximum (default 256).
//
// By default publishers and bridge run together, the clock running from the
// first publish until Kafka acknowledged every reading. Mosquitto drops QoS 1
// messages for a subscriber more than max_queued_messages (1,000 by default)
// behind, so the publishers keep at most LOCKSTREAM_BENCH_MQTT_AHEAD (default
// 900) readings ahead of what the bridge produced: the figure is the bridge's
// sustained rate on a machine the publishers and Mosquitto share with it.
//
// With LOCKSTREAM_BENCH_MQTT_PREFILL set, the bridge's session is created, the
// bridge stops, every reading is published into the session's queue, and the
// clock runs from the bridge's start until Kafka has them all: the bridge alone.
// That needs a Mosquitto whose max_queued_messages exceeds b.N
// (LOCKSTREAM_TEST_MQTT_URL can point at one).
//
// Should Mosquitto drop messages all the same, the readings it dropped never
// reach Kafka: the benchmark follows Mosquitto's own count of dropped messages
// ($SYS/broker/publish/messages/dropped) and fails, naming the cause, once the
// bridge's produced count stands still while that count has risen; and fails
// when the produced count stops moving for LOCKSTREAM_BENCH_STALL (default 30s)
// in any case, instead of waiting for readings that will not come.
//
//	go test -run '^$' -bench MQTTBridge -benchtime 200000x -timeout 30m ./bench/
func BenchmarkMQTTBridge(b *testing.B) {
	ctx := context.Background()
	kafka := benchKafka(b)
	suffix := bridgetest.Suffix(b)
	prefix := "lsbench/" + suffix + "/readings/"
	cfg := mqtt.Config{URL: bridgetest.MQTTURL(b), Topic: prefix + "+", Group: "lsbench" + suffix,
		ClientID: "lsbench-bridge-" + suffix, SessionExpiry: 10 * time.Minute,
		Inflight: envInt(b, "LOCKSTREAM_BENCH_MQTT_INFLIGHT", 0), Stream: kafka}
	prefill := os.Getenv("LOCKSTREAM_BENCH_MQTT_PREFILL") != ""
	ahead := int64(envInt(b, "LOCKSTREAM_BENCH_MQTT_AHEAD", 900))
	drops := watchMosquittoDrops(b, cfg.URL, "lsbench/"+suffix+"/marker")
	bridgetest.EndSession(b, cfg.ClientID)
	stop, reg := runMQTTBridge(b, cfg)
	pub, err := mqtt.NewPublisher(ctx, cfg.URL, prefix, 4)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()

	b.ResetTimer()
	readings := b.N
	if prefill {
		b.StopTimer()
		stop()
		// The publishers alone, for comparison with the live mode (untimed).
		cpu, t0 := bridgeCPU(), time.Now()
		publishMQTTReadings(b, pub, readings, nil)
		took, after := time.Since(t0), bridgeCPU()
		b.Logf("prefill: %d readings published in %.2fs (%.0f/s); cpu: this process %.2fs, mosquitto %.2fs",
			readings, took.Seconds(), float64(readings)/took.Seconds(), after.self-cpu.self, after.mosquitto-cpu.mosquitto)
		b.StartTimer()
	}
	before, start := bridgeCPU(), time.Now()
	var waited time.Duration
	if prefill {
		stop, reg = runMQTTBridge(b, cfg)
	}
	progress := newProgress(b, reg, "lockstream_mqtt", readings, drops)
	if !prefill {
		waited = publishMQTTReadings(b, pub, readings, func(i int) bool {
			return int64(i)-int64(progress.produced()) > ahead
		})
	}
	waitProduced(b, progress)
	b.StopTimer()
	wall, after := time.Since(start), bridgeCPU()
	stop()
	b.Logf("%d readings (prefilled %v) in Kafka after %.2fs (publishers waited %.2fs for the bridge); cpu: this process %.2fs (publishers and bridge), mosquitto %.2fs",
		readings, prefill, wall.Seconds(), waited.Seconds(), after.self-before.self, after.mosquitto-before.mosquitto)
	b.ReportMetric(float64(readings)/wall.Seconds(), "readings/s")
}

// mosquittoDrops follows Mosquitto's count of messages it dropped because a
// session's queue was full ($SYS/broker/publish/messages/dropped: retained,
// sent every sys_interval, 10 s by default, and only once it is not 0). The
// count is the broker's, over all its clients.
type mosquittoDrops struct {
	mu       sync.Mutex
	baseline int64
	last     int64
	ready    bool
}

const mosquittoDroppedTopic = "$SYS/broker/publish/messages/dropped"

// watchMosquittoDrops subscribes to Mosquitto's dropped count and returns once
// it knows the count before the run: it then publishes to marker, which it
// subscribed to in the same request, and the retained count (if any) comes
// before the marker does.
func watchMosquittoDrops(b *testing.B, rawURL, marker string) *mosquittoDrops {
	b.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		b.Fatalf("connecting to Mosquitto: %v", err)
	}
	d := &mosquittoDrops{}
	marked := make(chan struct{})
	var once sync.Once
	c := paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(r paho.PublishReceived) (bool, error) {
			if r.Packet.Topic == marker {
				once.Do(func() { close(marked) })
				return true, nil
			}
			n, err := strconv.ParseInt(strings.TrimSpace(string(r.Packet.Payload)), 10, 64)
			if err == nil {
				d.observe(n)
			}
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "lsbench-drops-" + bridgetest.Suffix(b), CleanStart: true, KeepAlive: 30}); err != nil {
		b.Fatalf("MQTT connect: %v", err)
	}
	b.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: mosquittoDroppedTopic, QoS: 0}, {Topic: marker, QoS: 0}}}); err != nil {
		b.Fatalf("subscribing to %s: %v", mosquittoDroppedTopic, err)
	}
	if _, err := c.Publish(ctx, &paho.Publish{Topic: marker, QoS: 0, Payload: []byte("x")}); err != nil {
		b.Fatalf("publishing to %s: %v", marker, err)
	}
	select {
	case <-marked:
	case <-ctx.Done():
		b.Fatalf("the marker published to %s did not come back", marker)
	}
	d.mu.Lock()
	d.ready = true
	d.mu.Unlock()
	return d
}

func (d *mosquittoDrops) observe(n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.ready {
		d.baseline = n
	}
	d.last = n
}

// since returns how many messages Mosquitto dropped since the watch began.
func (d *mosquittoDrops) since() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last - d.baseline
}

// progress follows a bridge benchmark's produced count and fails it, saying
// why, once the count cannot reach its target: it stands still while
// Mosquitto reports dropped messages, or it stopped moving for the stall
// limit.
type progress struct {
	b      *testing.B
	reg    prometheus.Gatherer
	prefix string // lockstream_amqp, lockstream_mqtt
	target int
	drops  *mosquittoDrops // nil for RabbitMQ, which drops nothing from a quorum queue
	stall  time.Duration
	last   float64
	moved  time.Time
}

func newProgress(b *testing.B, reg prometheus.Gatherer, prefix string, target int, drops *mosquittoDrops) *progress {
	stall, err := time.ParseDuration(cmp.Or(os.Getenv("LOCKSTREAM_BENCH_STALL"), "30s"))
	if err != nil {
		b.Fatalf("LOCKSTREAM_BENCH_STALL: %v", err)
	}
	return &progress{b: b, reg: reg, prefix: prefix, target: target, drops: drops, stall: stall, last: -1, moved: time.Now()}
}

// dropIdle is how long the produced count must stand still, below its
// target, before a rise of Mosquitto's dropped count is taken for this run's
// loss: the count is the broker's, over all its clients, so a rise while the
// bridge still makes progress proves nothing.
const dropIdle = 2 * time.Second

// produced returns the produced count, failing the benchmark as progress says.
func (p *progress) produced() float64 {
	got := bridgetest.Value(p.b, p.reg, p.prefix+"_produced_total")
	if got != p.last {
		p.last, p.moved = got, time.Now()
		return got
	}
	idle := time.Since(p.moved)
	if got >= float64(p.target) || idle < dropIdle {
		return got
	}
	if p.drops != nil {
		if n := p.drops.since(); n > 0 {
			p.b.Fatalf("%s_produced_total stands at %.0f of %d and Mosquitto has reported %d QoS 1 messages dropped since "+
				"the run began (%s, updated every sys_interval): a session more than max_queued_messages behind "+
				"loses them, so the rest will never come. "+
				"Use a Mosquitto with a larger max_queued_messages (LOCKSTREAM_TEST_MQTT_URL) or a smaller "+
				"LOCKSTREAM_BENCH_MQTT_AHEAD", p.prefix, got, p.target, n, mosquittoDroppedTopic)
		}
	}
	if idle > p.stall {
		received := bridgetest.Value(p.b, p.reg, p.prefix+"_received_total")
		p.b.Fatalf("%s_produced_total stuck at %.0f of %d for %v (the bridge received %.0f; the broker reported no "+
			"drop): the bridge or the broker is stuck (LOCKSTREAM_BENCH_STALL sets the limit)",
			p.prefix, got, p.target, p.stall, received)
	}
	return got
}

// waitProduced waits until the produced count reaches its target, or p fails
// the benchmark.
func waitProduced(b *testing.B, p *progress) {
	bridgetest.WaitFor(b, bridgeBenchWait, fmt.Sprintf("%d readings in Kafka", p.target), func() (bool, string) {
		got := p.produced()
		return got >= float64(p.target), fmt.Sprintf("%.0f", got)
	})
}

// publishMQTTReadings publishes n readings through pub and waits for every
// PUBACK; before each hundredth it waits while hold says so, and returns how
// long it waited.
func publishMQTTReadings(b *testing.B, pub *mqtt.Publisher, n int, hold func(i int) bool) time.Duration {
	ctx := context.Background()
	failed := make(chan error, 1)
	var waited time.Duration
	for i := range n {
		if hold != nil && i%100 == 0 {
			for t0 := time.Now(); hold(i); {
				time.Sleep(200 * time.Microsecond)
				waited += time.Since(t0)
				t0 = time.Now()
			}
		}
		rec := &kgo.Record{Key: []byte("b" + strconv.Itoa(i%10_000)), Value: []byte(strconv.Itoa((i / 10_000) % 2))}
		pub.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case failed <- err:
				default:
				}
			}
		})
	}
	if err := pub.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case err := <-failed:
		b.Fatal(err)
	default:
	}
	return waited
}

func runMQTTBridge(b *testing.B, cfg mqtt.Config) (stop func(), reg *prometheus.Registry) {
	reg = prometheus.NewRegistry()
	br, err := mqtt.New(cfg, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	bridgetest.WaitFor(b, time.Minute, "the MQTT bridge to subscribe", func() (bool, string) {
		return bridgetest.Value(b, reg, "lockstream_mqtt_connected") == 1, "not yet"
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				b.Error(err)
			}
		})
	}, reg
}

// benchKafka starts an embedded Kafka broker for one benchmark.
func benchKafka(b *testing.B) stream.Config {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	broker, err := stream.StartEmbedded(ctx, b.TempDir(), "127.0.0.1:0", stream.DefaultPartitions)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(broker.Close)
	return stream.Config{Brokers: broker.Addrs(), Partitions: stream.DefaultPartitions}
}

// brokerCPU is CPU seconds used so far by this process and by the local
// brokers' processes (RabbitMQ's Erlang VM, Mosquitto), from /proc.
type brokerCPU struct{ self, rabbitmq, mosquitto float64 }

func bridgeCPU() brokerCPU {
	var c brokerCPU
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		stat, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || end < open {
			continue
		}
		comm, fields := string(stat[open+1:end]), strings.Fields(string(stat[end+1:]))
		if len(fields) < 13 {
			continue
		}
		utime, _ := strconv.ParseFloat(fields[11], 64)
		stime, _ := strconv.ParseFloat(fields[12], 64)
		secs := (utime + stime) / clockTicks
		switch {
		case strings.HasPrefix(comm, "beam"):
			c.rabbitmq += secs
		case comm == "mosquitto":
			c.mosquitto += secs
		}
	}
	return c
}
