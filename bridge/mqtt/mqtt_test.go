package mqtt_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/bridge"
	"github.com/lockstream/lockstream/bridge/bridgetest"
	"github.com/lockstream/lockstream/bridge/mqtt"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// wait bounds every wait of these tests: generous, for a loaded 2-core machine
// under -race.
const wait = 90 * time.Second

// bundle is one test's bridge, with its own topic, group and session.
type bundle struct {
	t      *testing.T
	cfg    mqtt.Config
	reg    *prometheus.Registry
	pub    *bridgetest.MQTTPublisher
	prefix string // topic prefix: readings go to prefix + sensor id
	stop   func()
	log    *logBuffer
}

// logBuffer collects a bridge's log; safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), substr)
}

func setup(t *testing.T, kafka stream.Config, edit func(*mqtt.Config)) *bundle {
	t.Helper()
	suffix := bridgetest.Suffix(t)
	b := &bundle{t: t, prefix: "lstest/" + suffix + "/readings/", log: &logBuffer{}}
	b.cfg = mqtt.Config{
		URL:           bridgetest.MQTTURL(t),
		Topic:         b.prefix + "+",
		Group:         "lstest" + suffix,
		ClientID:      "lstest-bridge-" + suffix,
		SessionExpiry: 5 * time.Minute,
		RetryPause:    50 * time.Millisecond,
		ReconnectMin:  50 * time.Millisecond,
		ReconnectMax:  time.Second,
		Stream:        kafka,
	}
	if edit != nil {
		edit(&b.cfg)
	}
	// Registered first, so it runs last: after the bridge stopped.
	bridgetest.EndSession(t, b.cfg.ClientID)
	b.start()
	b.pub = bridgetest.DialMQTT(t)
	return b
}

// start runs a bridge (a new registry each time) until stop, and waits until it
// subscribed.
func (b *bundle) start() {
	b.t.Helper()
	b.reg = prometheus.NewRegistry()
	br, err := mqtt.New(b.cfg, b.reg, slog.New(slog.NewTextHandler(b.log, nil)))
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	var once sync.Once
	b.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					b.t.Errorf("bridge stopped with %v", err)
				}
			case <-time.After(wait):
				b.t.Errorf("bridge still running %v after cancel", wait)
			}
		})
	}
	b.t.Cleanup(b.stop)
	bridgetest.WaitFor(b.t, wait, "the bridge to subscribe", func() (bool, string) {
		return b.value("lockstream_mqtt_connected") == 1, "lockstream_mqtt_connected is 0"
	})
}

func (b *bundle) value(name string, labels ...string) float64 {
	return bridgetest.Value(b.t, b.reg, name, labels...)
}

func (b *bundle) publish(sensor, payload string) {
	b.pub.Publish(b.prefix+sensor, []byte(payload))
}

// waitRecords waits until topic holds at least n records and returns them all.
func waitRecords(t *testing.T, cfg stream.Config, topic string, n int) []*kgo.Record {
	t.Helper()
	client := streamtest.Client(t, cfg)
	bridgetest.WaitFor(t, wait, fmt.Sprintf("%d records on %s", n, topic), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, err := streamtest.EndOffsets(ctx, client, topic)
		if err != nil {
			return false, err.Error()
		}
		var sum int64
		for _, e := range ends {
			sum += e
		}
		return sum >= int64(n), fmt.Sprintf("%d records", sum)
	})
	return streamtest.ReadAll(t, cfg, topic)
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestReadingsReachKafka: a reading JSON and bare 0 and 1 payloads become
// readings records keyed by the topic's sensor id. Every message was
// acknowledged: a new bridge on the same session receives nothing again.
func TestReadingsReachKafka(t *testing.T) {
	t.Parallel()
	kafka := streamtest.Config(t, 3)
	b := setup(t, kafka, nil)
	b.publish("mqttA", `{"sensor_id":"mqttA","data":1,"ts":"2026-11-22T10:00:00Z"}`)
	b.publish("mqttB", "0")
	b.publish("mqttC", " 1\n")
	want := map[string]string{
		"mqttA": `{"sensor_id":"mqttA","data":1,"ts":"2026-11-22T10:00:00Z"}`,
		"mqttB": `{"sensor_id":"mqttB","data":0}`,
		"mqttC": `{"sensor_id":"mqttC","data":1}`,
	}
	got := map[string]string{}
	for _, r := range waitRecords(t, kafka, kafka.ReadingsTopic(), len(want)) {
		got[string(r.Key)] = string(r.Value)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("readings topic holds %v, want %v", got, want)
	}
	bridgetest.WaitFor(t, wait, "the produced readings to be counted", func() (bool, string) {
		n := b.value("lockstream_mqtt_produced_total")
		return n == 3, fmt.Sprintf("produced_total %v", n)
	})
	b.stop()

	// The session's unacknowledged messages would come first, before this one.
	b.start()
	b.publish("mqttD", "1")
	waitRecords(t, kafka, kafka.ReadingsTopic(), 4)
	if n := b.value("lockstream_mqtt_received_total"); n != 1 {
		t.Errorf("the next bridge on the session received %v messages, want only the new one (the others were acknowledged)", n)
	}
}

// TestBadPayloadsGoToDLQ: every kind of bad payload lands in the DLQ with its
// reason and the topic as source, and never holds up the good ones around it.
func TestBadPayloadsGoToDLQ(t *testing.T) {
	t.Parallel()
	kafka := streamtest.Config(t, 3)
	b := setup(t, kafka, nil)
	bad := []struct{ sensor, payload, reason string }{
		{"x1", "2", "bad_data"},
		{"x2", `{"sensor_id":"other","data":1}`, "key_mismatch"},
		{"x3", "not json", "not_json"},
		{"x34567890123456789", "1", "bad_sensor_id"},
		{"x4", `{"sensor_id":"x4","data":1,"battery":2}`, "unknown_field"},
		{"x5", `{"sensor_id":"x5","data":true}`, "bad_data"},
		{"x6", `{"sensor_id":"x6","data":1,"ts":"noon"}`, "bad_ts"},
		{"x7", "", "not_json"},
	}
	for i, c := range bad {
		b.publish(c.sensor, c.payload)
		b.publish("good"+strconv.Itoa(i), "1")
	}
	dlq := waitRecords(t, kafka, kafka.DLQTopic(), len(bad))
	if len(dlq) != len(bad) {
		t.Fatalf("DLQ holds %d records, want %d", len(dlq), len(bad))
	}
	for _, r := range dlq {
		src := header(r, bridge.HeaderSource)
		sensor := strings.TrimPrefix(src, "mqtt:"+b.prefix)
		var want string
		for _, c := range bad {
			if c.sensor == sensor {
				want = c.reason
			}
		}
		if want == "" || header(r, bridge.HeaderError) != want {
			t.Errorf("DLQ record from %q: reason %q, want %q (value %q)", src, header(r, bridge.HeaderError), want, r.Value)
		}
	}
	readings := waitRecords(t, kafka, kafka.ReadingsTopic(), len(bad))
	if len(readings) != len(bad) {
		t.Errorf("readings topic holds %d records, want the %d good ones", len(readings), len(bad))
	}
	bridgetest.WaitFor(t, wait, "the rejects to be counted", func() (bool, string) {
		n := b.value("lockstream_mqtt_rejected_total", "reason", "bad_data")
		return n == 2, fmt.Sprintf("rejected bad_data %v", n)
	})
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func embedded(t *testing.T, dir, addr string) *stream.Embedded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := stream.StartEmbedded(ctx, dir, addr, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func missing(records []*kgo.Record, prefix string, n int) []string {
	seen := map[string]bool{}
	for _, r := range records {
		seen[string(r.Key)] = true
	}
	var out []string
	for i := range n {
		if id := prefix + strconv.Itoa(i); !seen[id] {
			out = append(out, id)
		}
	}
	return out
}

// TestKafkaDownNothingAcknowledged stops the embedded Kafka broker twice. First
// the bridge keeps running: it retries, and every reading arrives once Kafka is
// back. Then the bridge itself stops while Kafka is down: a new bridge on the
// same session gets every message again from the broker (none was acknowledged)
// and every reading arrives.
func TestKafkaDownNothingAcknowledged(t *testing.T) {
	t.Parallel()
	dir, addr := t.TempDir(), freeAddr(t)
	broker := embedded(t, dir, addr)
	kafka := stream.Config{Brokers: broker.Addrs(), Partitions: 3}
	b := setup(t, kafka, func(c *mqtt.Config) {
		c.ProduceTimeout = time.Second
		c.DrainTimeout = 2 * time.Second
	})
	const n = 100

	broker.Close()
	for i := range n {
		b.publish("a"+strconv.Itoa(i), "1")
	}
	bridgetest.WaitFor(t, wait, "failed produces while Kafka is down", func() (bool, string) {
		r := b.value("lockstream_mqtt_retries_total")
		return r >= 1, fmt.Sprintf("retries_total %v", r)
	})
	broker = embedded(t, dir, addr)
	waitAll(t, kafka, "a", n)

	broker.Close()
	for i := range n {
		b.publish("b"+strconv.Itoa(i), "0")
	}
	bridgetest.WaitFor(t, wait, "the bridge to receive every message", func() (bool, string) {
		r := b.value("lockstream_mqtt_received_total")
		return r >= 2*n, fmt.Sprintf("received_total %v", r)
	})
	b.stop()
	embedded(t, dir, addr)
	b.start()
	waitAll(t, kafka, "b", n)
	if r := b.value("lockstream_mqtt_redelivered_total"); r < n {
		t.Errorf("the new bridge got %v messages again (DUP), want all %d: they were not acknowledged", r, n)
	}
}

// TestSessionTakeover: another connection takes the bridge's session over twice
// while readings stream in (the broker drops the bridge's connection, as a broker
// restart does); the bridge reconnects, takes its session back, and every
// reading arrives, those the intruder received but never acknowledged included.
func TestSessionTakeover(t *testing.T) {
	t.Parallel()
	kafka := streamtest.Config(t, 3)
	b := setup(t, kafka, nil)
	const n = 2000
	var (
		mu   sync.Mutex
		sent int
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if !b.pub.Publish(b.prefix+"t"+strconv.Itoa(i), []byte("1")) {
				return
			}
			mu.Lock()
			sent++
			mu.Unlock()
		}
	}()
	for _, at := range []int{n / 3, 2 * n / 3} {
		bridgetest.WaitFor(t, wait, fmt.Sprintf("%d published", at), func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return sent >= at, fmt.Sprintf("%d published", sent)
		})
		takeOver(t, b.cfg.ClientID)
	}
	<-done
	waitAll(t, kafka, "t", n)
	if c := b.log.count(`msg="mqtt subscribed"`); c < 3 {
		t.Errorf("the bridge subscribed %d times, want 3 (it reconnects after each takeover)", c)
	}
}

// waitAll waits until the readings topic holds a reading of each sensor
// prefix0 … prefix<n-1>.
func waitAll(t *testing.T, kafka stream.Config, prefix string, n int) {
	t.Helper()
	bridgetest.WaitFor(t, wait, fmt.Sprintf("readings of %s0 to %s%d", prefix, prefix, n-1), func() (bool, string) {
		m := missing(streamtest.ReadAll(t, kafka, kafka.ReadingsTopic()), prefix, n)
		if len(m) > 0 {
			time.Sleep(200 * time.Millisecond) // poll interval: ReadAll is not cheap
		}
		return len(m) == 0, fmt.Sprintf("%d missing, first %v", len(m), m[:min(len(m), 10)])
	})
}

// takeOver connects with clientID's session (which drops the bridge's
// connection), acknowledges nothing, and leaves.
func takeOver(t *testing.T, clientID string) {
	t.Helper()
	u, _ := url.Parse(bridgetest.MQTTURL(t))
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, EnableManualAcknowledgment: true,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(paho.PublishReceived) (bool, error) { return true, nil }}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	expiry := uint32(300)
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: clientID, CleanStart: false, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil {
		t.Fatalf("taking the session over: %v", err)
	}
	_ = c.Disconnect(&paho.Disconnect{})
}
