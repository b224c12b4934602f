package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/bridge"
	"github.com/lockstream/lockstream/bridge/amqp"
	"github.com/lockstream/lockstream/bridge/bridgetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// wait bounds every wait of these tests: generous, for a loaded 2-core machine
// under -race.
const wait = 90 * time.Second

// bundle is one test's bridge, with its own exchange, queue and Kafka cluster.
type bundle struct {
	t        *testing.T
	cfg      amqp.Config
	kafka    stream.Config
	broker   *bridgetest.AMQP
	reg      *prometheus.Registry
	pub      *bridgetest.Publisher
	stopOnce sync.Once
	stop     func()
}

// setup starts a bridge on a fresh exchange and queue; edit may change its
// config, its URL among it (the shared test broker's by default).
func setup(t *testing.T, kafka stream.Config, recorder amqp.NotificationRecorder, mailer bridge.Mailer, edit func(*amqp.Config)) *bundle {
	t.Helper()
	suffix := bridgetest.Suffix(t)
	cfg := amqp.Config{
		Exchange:       "lstest." + suffix,
		Queue:          "lstest.recorder." + suffix,
		ConnectionName: "lockstream test " + suffix,
		Prefetch:       64,
		RetryPause:     50 * time.Millisecond,
		ReconnectMin:   50 * time.Millisecond,
		ReconnectMax:   time.Second,
		EventsGroup:    "lstest-events-" + suffix,
		Stream:         kafka,
	}
	if edit != nil {
		edit(&cfg)
	}
	if cfg.URL == "" {
		cfg.URL = bridgetest.AMQPURL(t)
	}
	broker := bridgetest.DialAMQPURL(t, cfg.URL)
	broker.Exchange(cfg.Exchange)
	broker.DeleteQueueAtEnd(cfg.Queue)
	b := &bundle{t: t, cfg: cfg, kafka: kafka, broker: broker, reg: prometheus.NewRegistry()}
	b.start(recorder, mailer)
	b.waitConnected()
	b.pub = broker.Publisher(cfg.Exchange)
	return b
}

// start runs a bridge until stop (or the end of the test).
func (b *bundle) start(recorder amqp.NotificationRecorder, mailer bridge.Mailer) {
	b.t.Helper()
	br, err := amqp.New(b.cfg, recorder, mailer, b.reg, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	b.stopOnce = sync.Once{}
	b.stop = func() {
		b.stopOnce.Do(func() {
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
}

func (b *bundle) value(name string, labels ...string) float64 {
	return bridgetest.Value(b.t, b.reg, name, labels...)
}

func (b *bundle) waitConnected() {
	b.t.Helper()
	bridgetest.WaitFor(b.t, wait, "the bridge to consume", func() (bool, string) {
		return b.value("lockstream_amqp_connected") == 1, "lockstream_amqp_connected is 0"
	})
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

const readingKey = "events.sensor.update.reading"

// TestReadingsReachKafka: one reading, an array of them and a pretty-printed
// array become readings records keyed by sensor id, exactly as a Kafka producer
// would write them; every message is acknowledged (the queue is empty once the
// bridge stopped), and the new queue is a quorum queue.
func TestReadingsReachKafka(t *testing.T) {
	t.Parallel()
	kafka := streamtest.Config(t, 3)
	b := setup(t, kafka, nil, nil, nil)
	if typ := bridgetest.QueueType(t, b.cfg.Queue); typ != "quorum" {
		t.Errorf("queue type %q, want quorum (RabbitMQ 3.10 has them)", typ)
	}
	b.pub.Publish(readingKey, []byte(`{"sensor_id":"amqpA","data":1}`))
	b.pub.Publish(readingKey, []byte(`[{"sensor_id":"amqpB","data":0},{"sensor_id":"amqpC","data":1,"ts":"2026-11-22T10:00:00Z"}]`))
	b.pub.Publish(readingKey, []byte("[\n  {\"sensor_id\": \"amqpD\", \"data\": 0, \"ts\": 1795341600000}\n]"))

	want := map[string]string{
		"amqpA": `{"sensor_id":"amqpA","data":1}`,
		"amqpB": `{"sensor_id":"amqpB","data":0}`,
		"amqpC": `{"sensor_id":"amqpC","data":1,"ts":"2026-11-22T10:00:00Z"}`,
		"amqpD": `{"sensor_id":"amqpD","data":0,"ts":1795341600000}`,
	}
	got := map[string]string{}
	for _, r := range waitRecords(t, kafka, kafka.ReadingsTopic(), len(want)) {
		got[string(r.Key)] = string(r.Value)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("readings record keyed %s: %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("readings topic holds %v, want %v", got, want)
	}
	bridgetest.WaitFor(t, wait, "the produced readings to be counted", func() (bool, string) {
		n := b.value("lockstream_amqp_produced_total")
		return n == 4, fmt.Sprintf("produced_total %v", n)
	})
	b.stop()
	if n := bridgetest.QueueMessages(t, b.cfg.Queue); n != 0 {
		t.Errorf("the queue still holds %d messages after the bridge stopped: not all were acknowledged", n)
	}
	if n := b.value("lockstream_amqp_received_total"); n != 3 {
		t.Errorf("received_total %v, want 3", n)
	}
}

// TestBadMessagesGoToDLQ publishes every kind of bad message between good ones:
// each lands in the DLQ with its reason and source, the good ones all reach the
// readings topic, and each is counted by reason.
func TestBadMessagesGoToDLQ(t *testing.T) {
	t.Parallel()
	kafka := streamtest.Config(t, 3)
	b := setup(t, kafka, nil, nil, nil)
	huge := `[` + strings.Repeat(`{"sensor_id":"pad","data":1},`, bridge.MaxBodyBytes/28) + `{"sensor_id":"pad","data":1}]`
	bad := []struct{ body, reason string }{
		{`{"sensor_id":"x1","data":1`, "not_json"},
		{`not json at all`, "not_json"},
		{`{"sensor_id":"x2","data":2}`, "bad_data"},
		{`{"sensor_id":"x3456789012345678","data":1}`, "bad_sensor_id"},
		{`{"sensor_id":"x4","data":1,"battery":3}`, "unknown_field"},
		{`{"sensor_id":"x5","data":1,"data":0}`, "duplicate_field"},
		{`{"sensor_id":"x6","data":0,"ts":"noon"}`, "bad_ts"},
		{`[{"sensor_id":"x7","data":1},]`, "not_json"},
		{huge, "too_large"},
	}
	goods := 0
	for i, c := range bad {
		b.pub.Publish(readingKey, []byte(c.body))
		b.pub.Publish(readingKey, fmt.Appendf(nil, `{"sensor_id":"good%d","data":1}`, i))
		goods++
	}
	// An array with one bad element: the good ones go through, the bad one to the DLQ.
	b.pub.Publish(readingKey, []byte(`[{"sensor_id":"good98","data":0},{"sensor_id":"x8","data":"1"},{"sensor_id":"good99","data":1}]`))
	goods += 2

	dlq := waitRecords(t, kafka, kafka.DLQTopic(), len(bad)+1)
	reasons := map[string]int{}
	for _, r := range dlq {
		if src := header(r, bridge.HeaderSource); src != "amqp:"+readingKey {
			t.Errorf("DLQ record with source %q, want amqp:%s", src, readingKey)
		}
		reasons[header(r, bridge.HeaderError)]++
		if header(r, bridge.HeaderError) == "too_large" && header(r, bridge.HeaderOriginalSize) != fmt.Sprint(len(huge)) {
			t.Errorf("too_large DLQ record: original-size %q, want %d", header(r, bridge.HeaderOriginalSize), len(huge))
		}
		if header(r, bridge.HeaderError) == "bad_data" && string(r.Value) == `{"sensor_id":"x8","data":"1"}` &&
			!strings.HasPrefix(header(r, bridge.HeaderDetail), "[1] ") {
			t.Errorf("detail of a bad array element %q, want it to start with [1]", header(r, bridge.HeaderDetail))
		}
	}
	want := map[string]int{"not_json": 3, "bad_data": 2, "bad_sensor_id": 1, "unknown_field": 1, "duplicate_field": 1, "bad_ts": 1, "too_large": 1}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Errorf("DLQ reasons %v, want %v", reasons, want)
	}
	readings := waitRecords(t, kafka, kafka.ReadingsTopic(), goods)
	if len(readings) != goods {
		t.Errorf("readings topic holds %d records, want %d", len(readings), goods)
	}
	for _, r := range readings {
		if !strings.HasPrefix(string(r.Key), "good") {
			t.Errorf("readings topic holds %s=%s", r.Key, r.Value)
		}
	}
	bridgetest.WaitFor(t, wait, "the rejects to be counted", func() (bool, string) {
		var diff []string
		for reason, n := range want {
			if got := b.value("lockstream_amqp_rejected_total", "reason", reason); got != float64(n) {
				diff = append(diff, fmt.Sprintf("%s %v (want %d)", reason, got, n))
			}
		}
		return len(diff) == 0, strings.Join(diff, ", ")
	})
}

// TestUnknownCategoryIsAckedAndCounted: a category no handler takes, a sensor
// event type other than reading (lockstream's own republished events) and a
// routing key of another shape are acknowledged and counted, and block nothing.
func TestUnknownCategoryIsAckedAndCounted(t *testing.T) {
	t.Parallel()
	kafka := streamtest.Config(t, 3)
	b := setup(t, kafka, nil, nil, func(c *amqp.Config) { c.Binding = "#" })
	b.pub.Publish("events.weather.update.rain", []byte(`{"mm":3}`))
	b.pub.Publish("events.sensor.update.state_changed", []byte(`{"id":"e1","type":"state_changed"}`))
	b.pub.Publish("something.else", []byte(`{}`))
	b.pub.Publish(readingKey, []byte(`{"sensor_id":"after","data":1}`))
	waitRecords(t, kafka, kafka.ReadingsTopic(), 1)
	bridgetest.WaitFor(t, wait, "the ignored messages to be counted", func() (bool, string) {
		u := b.value("lockstream_amqp_ignored_total", "category", "unknown")
		s := b.value("lockstream_amqp_ignored_total", "category", "sensor")
		m := b.value("lockstream_amqp_ignored_total", "category", "malformed")
		return u == 1 && s == 1 && m == 1, fmt.Sprintf("unknown %v, sensor %v, malformed %v", u, s, m)
	})
	b.stop()
	if n := bridgetest.QueueMessages(t, b.cfg.Queue); n != 0 {
		t.Errorf("the queue still holds %d messages after the bridge stopped", n)
	}
}

// TestNotificationsWithoutInboxAreKept: with no notification recorder wired (a
// bridge built without a store), a free-form notification is acknowledged and
// kept in the DLQ with reason notification_unavailable.
func TestNotificationsWithoutInboxAreKept(t *testing.T) {
	t.Parallel()
	kafka := streamtest.Config(t, 3)
	b := setup(t, kafka, nil, nil, nil)
	body := `{"member_id":"m1","type":"data","subject":"hello","message":"hi"}`
	b.pub.Publish("events.notification.update.data", []byte(body))
	dlq := waitRecords(t, kafka, kafka.DLQTopic(), 1)
	if r := dlq[0]; header(r, bridge.HeaderError) != amqp.ReasonNotificationUnavailable || string(r.Value) != body ||
		header(r, bridge.HeaderSource) != "amqp:events.notification.update.data" {
		t.Errorf("DLQ record %q with headers %v", r.Value, r.Headers)
	}
}

// recorder is a NotificationRecorder that fails recoverably its first fails calls.
type recorder struct {
	mu       sync.Mutex
	fails    int
	calls    int
	recorded []string
}

func (r *recorder) RecordNotification(_ context.Context, m amqp.Message) error {
	typ, body := m.Type, m.Body
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.calls <= r.fails {
		return errors.New("store down")
	}
	if strings.Contains(string(body), "nobody") {
		return bridge.Reject("unknown_member", "no member nobody")
	}
	r.recorded = append(r.recorded, typ+" "+string(body))
	return nil
}

func (r *recorder) snapshot() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, append([]string(nil), r.recorded...)
}

// TestNotificationRecorderErrors: a recoverable error hands the message back for
// redelivery (it is recorded once the store is back), an unrecoverable one keeps
// it in the DLQ with the recorder's reason.
func TestNotificationRecorderErrors(t *testing.T) {
	t.Parallel()
	kafka := streamtest.Config(t, 3)
	rec := &recorder{fails: 3}
	b := setup(t, kafka, rec, nil, nil)
	b.pub.Publish("events.notification.update.data", []byte(`{"member_id":"m1"}`))
	bridgetest.WaitFor(t, wait, "the notification to be recorded", func() (bool, string) {
		calls, got := rec.snapshot()
		return len(got) == 1, fmt.Sprintf("%d calls, recorded %v", calls, got)
	})
	if _, got := rec.snapshot(); got[0] != `data {"member_id":"m1"}` {
		t.Errorf("recorded %q", got[0])
	}
	if n := b.value("lockstream_amqp_redelivered_total"); n != 3 {
		t.Errorf("redelivered_total %v, want 3", n)
	}
	if n := b.value("lockstream_amqp_retries_total"); n != 3 {
		t.Errorf("retries_total %v, want 3", n)
	}
	b.pub.Publish("events.notification.update.data", []byte(`{"member_id":"nobody"}`))
	dlq := waitRecords(t, kafka, kafka.DLQTopic(), 1)
	if header(dlq[0], bridge.HeaderError) != "unknown_member" {
		t.Errorf("DLQ reason %q, want unknown_member", header(dlq[0], bridge.HeaderError))
	}
}

// blockingRecorder holds every notification until release is closed.
type blockingRecorder struct{ release chan struct{} }

func (r *blockingRecorder) RecordNotification(ctx context.Context, _ amqp.Message) error {
	select {
	case <-r.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestSlowMessageHoldsNothingUp: a message whose handler takes long does not hold
// up the ones after it, even past the prefetch window: those finish and are
// acknowledged on their own (acknowledgements go out in batches otherwise).
func TestSlowMessageHoldsNothingUp(t *testing.T) {
	t.Parallel()
	kafka := streamtest.Config(t, 3)
	rec := &blockingRecorder{release: make(chan struct{})}
	b := setup(t, kafka, rec, nil, func(c *amqp.Config) {
		c.Prefetch = 4
		// The slow message is held until the others are through, however long
		// a loaded machine takes: its handler must not time out meanwhile.
		c.HandleTimeout = wait
	})
	b.pub.Publish("events.notification.update.data", []byte(`{"member_id":"slow"}`))
	const n = 40 // ten prefetch windows
	for i := range n {
		b.pub.Publish(readingKey, fmt.Appendf(nil, `{"sensor_id":"after%d","data":1}`, i))
	}
	waitRecords(t, kafka, kafka.ReadingsTopic(), n)
	close(rec.release)
	b.stop()
	// A quorum queue applies acknowledgements through its log, after the
	// channel closed: wait for the count, which stays above 0 only if the slow
	// message went back to the queue.
	bridgetest.WaitFor(t, wait, "the queue to be empty after the bridge stopped", func() (bool, string) {
		got := bridgetest.QueueMessages(t, b.cfg.Queue)
		return got == 0, fmt.Sprintf("the queue still holds %d messages", got)
	})
}

// TestQueueDeletedIsDeclaredAgain: when its queue is deleted under it (the broker
// cancels the consumer), the bridge reconnects, declares the queue again and
// goes on consuming.
func TestQueueDeletedIsDeclaredAgain(t *testing.T) {
	t.Parallel()
	kafka := streamtest.Config(t, 3)
	b := setup(t, kafka, nil, nil, nil)
	if _, err := b.broker.Channel().QueueDelete(b.cfg.Queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	bridgetest.WaitFor(t, wait, "the queue to be declared again", func() (bool, string) {
		ch, err := b.broker.Conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ch.Close() }()
		_, err = ch.QueueDeclarePassive(b.cfg.Queue, true, false, false, false, nil)
		return err == nil, fmt.Sprint(err)
	})
	b.waitConnected()
	b.pub.Publish(readingKey, []byte(`{"sensor_id":"again","data":1}`))
	if r := waitRecords(t, kafka, kafka.ReadingsTopic(), 1); string(r[0].Key) != "again" {
		t.Errorf("readings topic holds %s", r[0].Key)
	}
}
