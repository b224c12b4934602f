package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
	waitProduced(b, reg, "lockstream_amqp_produced_total", readings)
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
// Kafka: 4 publishing connections send b.N bare 0/1 readings of 10,000 sensors to
// the local Mosquitto at QoS 1 (20 in flight per connection, Mosquitto's default
// Receive Maximum) while a bridge takes them into Kafka (an embedded broker); the
// clock runs from the first publish until Kafka acknowledged every reading.
//
// Mosquitto drops QoS 1 messages for a subscriber that falls more than
// max_queued_messages (1,000 by default) behind, so the publishers keep at most
// LOCKSTREAM_BENCH_MQTT_AHEAD (default 900) readings ahead of what the bridge
// produced: the figure is the bridge's sustained rate, not how fast Mosquitto
// accepts messages. LOCKSTREAM_BENCH_MQTT_INFLIGHT sets the bridge's Receive
// Maximum (default 256).
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
	ahead := int64(envInt(b, "LOCKSTREAM_BENCH_MQTT_AHEAD", 900))
	bridgetest.EndSession(b, cfg.ClientID)
	reg := prometheus.NewRegistry()
	br, err := mqtt.New(cfg, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- br.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	bridgetest.WaitFor(b, time.Minute, "the MQTT bridge to subscribe", func() (bool, string) {
		return bridgetest.Value(b, reg, "lockstream_mqtt_connected") == 1, "not yet"
	})
	pub, err := mqtt.NewPublisher(ctx, cfg.URL, prefix, 4)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()

	b.ResetTimer()
	readings := b.N
	before, start := bridgeCPU(), time.Now()
	failed := make(chan error, 1)
	var waited time.Duration
	for i := range readings {
		if i%100 == 0 {
			// Stay within what Mosquitto queues for the bridge.
			for t0 := time.Now(); int64(i)-int64(bridgetest.Value(b, reg, "lockstream_mqtt_produced_total")) > ahead; {
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
	waitProduced(b, reg, "lockstream_mqtt_produced_total", readings)
	b.StopTimer()
	wall, after := time.Since(start), bridgeCPU()
	b.Logf("%d readings in Kafka after %.2fs (publishers waited %.2fs for the bridge); cpu: this process %.2fs (publishers and bridge), mosquitto %.2fs",
		readings, wall.Seconds(), waited.Seconds(), after.self-before.self, after.mosquitto-before.mosquitto)
	b.ReportMetric(float64(readings)/wall.Seconds(), "readings/s")
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

// waitProduced waits until the counter name reaches n.
func waitProduced(b *testing.B, reg prometheus.Gatherer, name string, n int) {
	bridgetest.WaitFor(b, bridgeBenchWait, fmt.Sprintf("%d readings in Kafka", n), func() (bool, string) {
		got := bridgetest.Value(b, reg, name)
		return got >= float64(n), fmt.Sprintf("%.0f (a shortfall that never ends: Mosquitto dropped messages, see max_queued_messages)", got)
	})
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
