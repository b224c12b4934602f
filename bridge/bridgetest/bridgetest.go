// Package bridgetest gives the bridges' tests the real local brokers — RabbitMQ
// and Mosquitto, at the addresses `make services` starts them on, or those of
// LOCKSTREAM_TEST_AMQP_URL and LOCKSTREAM_TEST_MQTT_URL — with names unique to
// each test, so tests running at once never share an exchange, queue, topic or
// session. A broker that does not answer fails the test with instructions; it is
// never skipped.
package bridgetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The brokers' addresses, unless the environment names others.
const (
	DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultMQTTURL = "mqtt://127.0.0.1:1883"
	AMQPURLEnv     = "LOCKSTREAM_TEST_AMQP_URL"
	MQTTURLEnv     = "LOCKSTREAM_TEST_MQTT_URL"
)

const howToStart = "start the local brokers with `make services` (as root: installs and starts RabbitMQ and Mosquitto " +
	"on 127.0.0.1), or point %s at a broker"

// Suffix returns a short random name part unique to one test.
func Suffix(t testing.TB) string {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// AMQPURL returns the RabbitMQ URL for tests, failing t unless it answers.
func AMQPURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(AMQPURLEnv)
	if u == "" {
		u = DefaultAMQPURL
	}
	conn, err := amqp091.DialConfig(u, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatalf("RabbitMQ at %s does not answer (%v): "+howToStart, redact(u), err, AMQPURLEnv)
	}
	_ = conn.Close()
	return u
}

// MQTTURL returns the Mosquitto URL for tests, failing t unless it answers.
func MQTTURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(MQTTURLEnv)
	if u == "" {
		u = DefaultMQTTURL
	}
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatalf("%s=%q: %v", MQTTURLEnv, u, err)
	}
	conn, err := net.DialTimeout("tcp", parsed.Host, 5*time.Second)
	if err != nil {
		t.Fatalf("Mosquitto at %s does not answer (%v): "+howToStart, u, err, MQTTURLEnv)
	}
	_ = conn.Close()
	return u
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}

// AMQP is a test's own connection to RabbitMQ, closed when the test ends.
type AMQP struct {
	t    testing.TB
	URL  string
	Conn *amqp091.Connection
}

// DialAMQP connects to the test broker.
func DialAMQP(t testing.TB) *AMQP {
	t.Helper()
	return DialAMQPURL(t, AMQPURL(t))
}

// DialAMQPURL connects to the broker at u (a Node's).
func DialAMQPURL(t testing.TB, u string) *AMQP {
	t.Helper()
	conn, err := amqp091.Dial(u)
	if err != nil {
		t.Fatalf("connecting to RabbitMQ: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &AMQP{t: t, URL: u, Conn: conn}
}

// Channel opens a channel, closed when the test ends.
func (a *AMQP) Channel() *amqp091.Channel {
	a.t.Helper()
	ch, err := a.Conn.Channel()
	if err != nil {
		a.t.Fatalf("opening an AMQP channel: %v", err)
	}
	a.t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// Exchange declares the durable topic exchange name (as the bridge does) and
// deletes it when the test ends.
func (a *AMQP) Exchange(name string) {
	a.t.Helper()
	ch := a.Channel()
	if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		a.t.Fatalf("declaring exchange %s: %v", name, err)
	}
	a.t.Cleanup(func() {
		a.deleteAfter(func(ch *amqp091.Channel) error { return ch.ExchangeDelete(name, false, false) })
	})
}

// DeleteQueueAtEnd deletes queue name when the test ends (the bridge declares it).
func (a *AMQP) DeleteQueueAtEnd(name string) {
	a.t.Cleanup(func() {
		a.deleteAfter(func(ch *amqp091.Channel) error { _, err := ch.QueueDelete(name, false, false, false); return err })
	})
}

// deleteAfter runs a deletion on a fresh connection (the test's may be closed).
func (a *AMQP) deleteAfter(del func(*amqp091.Channel) error) {
	conn, err := amqp091.Dial(a.URL)
	if err != nil {
		a.t.Logf("cleanup: connecting to RabbitMQ: %v", err)
		return
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		a.t.Logf("cleanup: %v", err)
		return
	}
	if err := del(ch); err != nil {
		a.t.Logf("cleanup: %v", err)
	}
}

// Queue declares a classic durable queue bound to exchange with pattern and
// returns its deliveries (auto-ack), for tests that listen to what is published.
func (a *AMQP) Queue(name, exchange, pattern string) <-chan amqp091.Delivery {
	a.t.Helper()
	ch := a.Channel()
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		a.t.Fatalf("declaring queue %s: %v", name, err)
	}
	a.DeleteQueueAtEnd(name)
	if err := ch.QueueBind(name, pattern, exchange, false, nil); err != nil {
		a.t.Fatalf("binding queue %s: %v", name, err)
	}
	d, err := ch.Consume(name, "", true, false, false, false, nil)
	if err != nil {
		a.t.Fatalf("consuming %s: %v", name, err)
	}
	return d
}

// Publisher publishes to one exchange with publisher confirms.
type Publisher struct {
	t        testing.TB
	ch       *amqp091.Channel
	exchange string
}

// Publisher returns a confirming publisher to exchange.
func (a *AMQP) Publisher(exchange string) *Publisher {
	a.t.Helper()
	ch := a.Channel()
	if err := ch.Confirm(false); err != nil {
		a.t.Fatalf("confirm mode: %v", err)
	}
	return &Publisher{t: a.t, ch: ch, exchange: exchange}
}

// Publish publishes body with routing key and waits for the broker's confirm.
// It is safe to call from a goroutine other than the test's (it reports with
// Errorf).
func (p *Publisher) Publish(key string, body []byte) bool {
	return p.PublishMessage(key, amqp091.Publishing{ContentType: "application/json", DeliveryMode: amqp091.Persistent, Body: body})
}

// PublishMessage is Publish with the message's properties (message-id,
// timestamp…) given.
func (p *Publisher) PublishMessage(key string, msg amqp091.Publishing) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, key, false, false, msg)
	if err != nil {
		p.t.Errorf("publishing %s: %v", key, err)
		return false
	}
	if ok, err := c.WaitContext(ctx); err != nil || !ok {
		p.t.Errorf("publishing %s: confirmed %v, %v", key, ok, err)
		return false
	}
	return true
}

// MQTTPublisher is a plain MQTT 5 client of the test broker, for publishing.
type MQTTPublisher struct {
	t      testing.TB
	Client *paho.Client
}

// DialMQTT connects a publishing client (clean session), disconnected when the
// test ends.
func DialMQTT(t testing.TB) *MQTTPublisher {
	t.Helper()
	u, _ := url.Parse(MQTTURL(t))
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatalf("connecting to Mosquitto: %v", err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "lstest-pub-" + Suffix(t), CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatalf("MQTT connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return &MQTTPublisher{t: t, Client: c}
}

// Publish publishes payload to topic at QoS 1 and waits for the broker's PUBACK.
// It is safe to call from another goroutine (it reports with Errorf).
func (p *MQTTPublisher) Publish(topic string, payload []byte) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.Client.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: payload}); err != nil {
		p.t.Errorf("publishing to %s: %v", topic, err)
		return false
	}
	return true
}

// EndSession removes the persistent session of clientID from the broker (a
// clean-start connection whose session ends with it), when the test ends.
func EndSession(t testing.TB, clientID string) {
	t.Cleanup(func() {
		u, _ := url.Parse(MQTTURL(t))
		conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err != nil {
			t.Logf("cleanup: %v", err)
			return
		}
		c := paho.NewClient(paho.ClientConfig{Conn: conn})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Connect(ctx, &paho.Connect{ClientID: clientID, CleanStart: true}); err != nil {
			t.Logf("cleanup: ending MQTT session %s: %v", clientID, err)
			return
		}
		_ = c.Disconnect(&paho.Disconnect{})
	})
}

// Rabbitmqctl runs rabbitmqctl (as the local broker's administrator) and
// returns its output, failing t when it fails.
func Rabbitmqctl(t testing.TB, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		path = "/usr/sbin/rabbitmqctl"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s\n(the test needs the local RabbitMQ's rabbitmqctl, run as root: `make services`)",
			strings.Join(args, " "), err, out)
	}
	return string(out)
}

// QueueMessages returns how many messages queue holds, ready and unacknowledged
// together (rabbitmqctl's "messages").
func QueueMessages(t testing.TB, queue string) int {
	t.Helper()
	return queueMessages(t, Rabbitmqctl(t, "list_queues", "--quiet", "--no-table-headers", "name", "messages"), queue)
}

// queueMessages reads queue's count from list_queues' output out.
func queueMessages(t testing.TB, out, queue string) int {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == queue {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("rabbitmqctl list_queues: %q", line)
			}
			return n
		}
	}
	t.Fatalf("rabbitmqctl list_queues does not list %s:\n%s", queue, out)
	return 0
}

// QueueType returns the type rabbitmqctl gives queue (classic, quorum).
func QueueType(t testing.TB, queue string) string {
	t.Helper()
	return queueType(t, Rabbitmqctl(t, "list_queues", "--quiet", "--no-table-headers", "name", "type"), queue)
}

// queueType reads queue's type from list_queues' output out.
func queueType(t testing.TB, out, queue string) string {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == queue {
			return f[1]
		}
	}
	t.Fatalf("rabbitmqctl list_queues does not list %s:\n%s", queue, out)
	return ""
}

// CloseConnections closes every connection named name (the connection_name
// client property) from the broker's side, as a broker restart does, and
// returns how many it closed.
func CloseConnections(t testing.TB, name string) int {
	t.Helper()
	out := Rabbitmqctl(t, "list_connections", "--quiet", "--no-table-headers", "pid", "client_properties")
	want := fmt.Sprintf(`{"connection_name",%q}`, name)
	n := 0
	for line := range strings.SplitSeq(out, "\n") {
		pid, props, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if !ok || !strings.Contains(props, want) {
			continue
		}
		Rabbitmqctl(t, "close_connection", pid, "lockstream test: as if the broker restarted")
		n++
	}
	return n
}

// Value returns the value of the metric name with the given label pairs
// ("reason", "bad_data") from g; 0 when absent.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	return 0
}

// WaitFor polls cond every 20 ms until it holds, failing t after timeout with
// what cond says it still waits for.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, still := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s: %s", timeout, what, still)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}
