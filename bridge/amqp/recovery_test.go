package amqp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/bridge"
	"github.com/lockstream/lockstream/bridge/amqp"
	"github.com/lockstream/lockstream/bridge/bridgetest"
	"github.com/lockstream/lockstream/notifier/email"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

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

// embedded starts lockstream's embedded Kafka broker at addr with its log in dir.
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

// sensorsOf returns the distinct keys of records.
// waitSensors waits until the topic holds a record of each of the n sensors
// prefix0 … prefix(n-1) — not merely n records: redelivered duplicates can
// make up the count while the last reading is still on its way — and returns
// the records.
func waitSensors(t *testing.T, cfg stream.Config, topic, prefix string, n int) []*kgo.Record {
	t.Helper()
	waitRecords(t, cfg, topic, n)
	var records []*kgo.Record
	bridgetest.WaitFor(t, wait, fmt.Sprintf("a record of each of the %d sensors %s…", n, prefix), func() (bool, string) {
		records = streamtest.ReadAll(t, cfg, topic)
		sensors := sensorsOf(records)
		for i := range n {
			if !sensors[prefix+strconv.Itoa(i)] {
				return false, fmt.Sprintf("%d records, none yet of %s%d", len(records), prefix, i)
			}
		}
		return true, ""
	})
	return records
}

func sensorsOf(records []*kgo.Record) map[string]bool {
	out := map[string]bool{}
	for _, r := range records {
		out[string(r.Key)] = true
	}
	return out
}

// TestKafkaDownNothingAcknowledged stops the embedded Kafka broker, publishes
// readings, sees the bridge try some (redeliveries) while the queue keeps every
// one of them unacknowledged, starts the broker again and finds every reading
// on the readings topic.
func TestKafkaDownNothingAcknowledged(t *testing.T) {
	t.Parallel()
	dir, addr := t.TempDir(), freeAddr(t)
	broker := embedded(t, dir, addr)
	kafka := stream.Config{Brokers: broker.Addrs(), Partitions: 3}
	b := setup(t, kafka, nil, nil, func(c *amqp.Config) { c.HandleTimeout = time.Second })
	b.pub.Publish(readingKey, []byte(`{"sensor_id":"before","data":1}`))
	waitRecords(t, kafka, kafka.ReadingsTopic(), 1)

	broker.Close()
	const n = 200
	for i := range n {
		b.pub.Publish(readingKey, fmt.Appendf(nil, `{"sensor_id":"down%d","data":%d}`, i, i%2))
	}
	// The bridge tried messages and handed them back: a prefetch's worth came
	// again.
	bridgetest.WaitFor(t, wait, "redeliveries while Kafka is down", func() (bool, string) {
		got := b.value("lockstream_amqp_redelivered_total")
		return got >= float64(b.cfg.Prefetch), fmt.Sprintf("redelivered_total %v", got)
	})
	if got := bridgetest.QueueMessages(t, b.cfg.Queue); got != n {
		t.Fatalf("with Kafka down the queue holds %d messages (ready and unacknowledged), want all %d", got, n)
	}
	if got := b.value("lockstream_amqp_produced_total"); got != 1 {
		t.Fatalf("produced_total %v with Kafka down, want 1 (the reading before)", got)
	}

	embedded(t, dir, addr)
	records := waitSensors(t, kafka, kafka.ReadingsTopic(), "down", n)
	sensors := sensorsOf(records)
	for i := range n {
		if !sensors["down"+strconv.Itoa(i)] {
			t.Errorf("reading of down%d missing once Kafka was back", i)
		}
	}
	bridgetest.WaitFor(t, wait, "the queue to empty", func() (bool, string) {
		got := bridgetest.QueueMessages(t, b.cfg.Queue)
		return got == 0, fmt.Sprintf("%d messages left", got)
	})
}

// TestReconnectsAfterBrokerClosesConnection closes the bridge's connection from
// the broker's side (rabbitmqctl close_connection: what a broker restart looks
// like to the client) twice while readings stream in: the bridge reconnects and
// every reading arrives.
func TestReconnectsAfterBrokerClosesConnection(t *testing.T) {
	t.Parallel()
	kafka := streamtest.Config(t, 3)
	b := setup(t, kafka, nil, nil, nil)
	const n = 3000
	published := make(chan struct{})
	var count sync.WaitGroup
	count.Add(1)
	var sent int64
	var mu sync.Mutex
	go func() {
		defer count.Done()
		defer close(published)
		for i := range n {
			if !b.pub.Publish(readingKey, fmt.Appendf(nil, `{"sensor_id":"r%d","data":1}`, i)) {
				return
			}
			mu.Lock()
			sent++
			mu.Unlock()
		}
	}()
	for _, at := range []int64{n / 3, 2 * n / 3} {
		bridgetest.WaitFor(t, wait, fmt.Sprintf("%d readings published", at), func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return sent >= at, fmt.Sprintf("%d published", sent)
		})
		if closed := bridgetest.CloseConnections(t, b.cfg.ConnectionName); closed != 1 {
			t.Fatalf("closed %d connections named %q, want 1", closed, b.cfg.ConnectionName)
		}
		b.waitConnected()
	}
	count.Wait()
	records := waitSensors(t, kafka, kafka.ReadingsTopic(), "r", n)
	sensors := sensorsOf(records)
	for i := range n {
		if !sensors["r"+strconv.Itoa(i)] {
			t.Errorf("reading r%d lost across the reconnections", i)
		}
	}
	t.Logf("%d readings published, %d records produced (duplicates are redelivered messages)", n, len(records))
	bridgetest.WaitFor(t, wait, "the queue to empty", func() (bool, string) {
		got := bridgetest.QueueMessages(t, b.cfg.Queue)
		return got == 0, fmt.Sprintf("%d messages left", got)
	})
}

// TestRepublishesEvents: with PublishEvents on, a queue bound to
// events.sensor.update.* receives every event of lockstream.events, with its
// type in the routing key, and the bridge's own queue ignores them.
func TestRepublishesEvents(t *testing.T) {
	t.Parallel()
	kafka := streamtest.Config(t, 3)
	b := setup(t, kafka, nil, nil, func(c *amqp.Config) { c.PublishEvents = true })
	listener := b.broker.Queue("lstest.listener."+bridgetest.Suffix(t), b.cfg.Exchange, "events.sensor.update.*")

	types := []string{"state_changed", "connection_lost", "connection_restored"}
	const n = 300
	client := streamtest.Client(t, kafka)
	var records []*kgo.Record
	for i := range n {
		typ := types[i%len(types)]
		value := fmt.Sprintf(`{"id":"ev%03d","type":%q,"sensor_id":"s%d","data":1,"previous":null,"at":"2026-11-22T10:00:00Z"}`, i, typ, i%7)
		records = append(records, &kgo.Record{Topic: kafka.EventsTopic(), Key: fmt.Appendf(nil, "s%d", i%7), Value: []byte(value)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := client.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for len(got) < n {
		select {
		case d := <-listener:
			var e struct{ ID, Type string }
			if err := json.Unmarshal(d.Body, &e); err != nil {
				t.Fatalf("listener got %q: %v", d.Body, err)
			}
			if d.RoutingKey != "events.sensor.update."+e.Type || d.MessageId != e.ID {
				t.Errorf("event %s (%s) came with routing key %s, message id %q", e.ID, e.Type, d.RoutingKey, d.MessageId)
			}
			got[e.ID] = e.Type
		case <-ctx.Done():
			t.Fatalf("the listener received %d of %d events", len(got), n)
		}
	}
	bridgetest.WaitFor(t, wait, "the bridge to ignore its own republished events", func() (bool, string) {
		v := b.value("lockstream_amqp_ignored_total", "category", "sensor")
		return v >= n, fmt.Sprintf("ignored sensor %v", v)
	})
	// The confirmed events are marked, and committed by the group's next commit
	// (stream.CommitInterval); its Kafka client reports as client="amqp-events".
	bridgetest.WaitFor(t, wait, "the republished events committed", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		committed, err := streamtest.Committed(ctx, client, b.cfg.EventsGroup, kafka.EventsTopic())
		if err != nil {
			return false, err.Error()
		}
		var sum int64
		for _, o := range committed {
			sum += o
		}
		return sum == n, fmt.Sprintf("committed %d of %d", sum, n)
	})
	if v := b.value("lockstream_kafka_fetch_bytes_total", "client", "amqp-events"); v <= 0 {
		t.Errorf("lockstream_kafka_fetch_bytes_total{client=\"amqp-events\"} = %v, want the republisher's fetches counted", v)
	}
}

// TestAlertEmails: unrecoverable messages are mailed to the alert address at most
// once per interval, and the emails together count every one of them.
func TestAlertEmails(t *testing.T) {
	t.Parallel()
	kafka := streamtest.Config(t, 3)
	smtpServer := bridgetest.StartSMTP(t)
	mailer, err := email.New(email.Config{SMTPURL: smtpServer.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const interval = 700 * time.Millisecond
	b := setup(t, kafka, nil, mailer, func(c *amqp.Config) {
		c.Alert = bridge.AlertConfig{To: "ops@example.com", Interval: interval}
	})
	const n = 12
	for i := range n {
		b.pub.Publish(readingKey, fmt.Appendf(nil, `{"sensor_id":"bad%d","data":7}`, i))
		if i == n/2 {
			time.Sleep(interval) // let a second email become due (not an assertion)
		}
	}
	countRE := regexp.MustCompile(`(\d+) unrecoverable message`)
	var mails []bridgetest.Mail
	total := 0
	for total < n {
		select {
		case m := <-smtpServer.Got:
			mails = append(mails, m)
			c := countRE.FindStringSubmatch(m.Subject)
			if m.To != "ops@example.com" || c == nil {
				t.Fatalf("unexpected alert email to %s: %q", m.To, m.Subject)
			}
			k, _ := strconv.Atoi(c[1])
			total += k
		case <-time.After(wait):
			t.Fatalf("alert emails counted %d of %d unrecoverable messages", total, n)
		}
	}
	if total != n {
		t.Errorf("alert emails counted %d, want %d", total, n)
	}
	for i := 1; i < len(mails); i++ {
		if gap := mails[i].At.Sub(mails[i-1].At); gap < interval {
			t.Errorf("emails %d and %d came %v apart, less than the interval %v", i-1, i, gap, interval)
		}
	}
	if len(mails) < 2 {
		t.Errorf("%d email(s), want at least 2 (messages came on both sides of an interval)", len(mails))
	}
	if !regexp.MustCompile(`bad_data\s+\d+`).MatchString(mails[0].Body) {
		t.Errorf("the alert body does not count bad_data:\n%s", mails[0].Body)
	}
}

// TestNotificationPublisher publishes a free-form notification as
// events.notification.update.<type>, confirmed, and reconnects after the broker
// closed its connection.
func TestNotificationPublisher(t *testing.T) {
	t.Parallel()
	broker := bridgetest.DialAMQP(t)
	suffix := bridgetest.Suffix(t)
	cfg := amqp.Config{URL: broker.URL, Exchange: "lstest." + suffix, ConnectionName: "lockstream test " + suffix}
	broker.Exchange(cfg.Exchange)
	listener := broker.Queue("lstest.notes."+suffix, cfg.Exchange, "events.notification.update.*")
	p, err := amqp.NewNotificationPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var ids []string
	for i, typ := range []string{"data", "analysis"} {
		if i == 1 {
			bridgetest.CloseConnections(t, cfg.ConnectionName+" (notifications)")
		}
		body := fmt.Sprintf(`{"member_id":"m1","type":%q,"subject":"s%d"}`, typ, i)
		var err error
		// The first publish after the broker closed the connection may fail; the
		// next one reconnects.
		for attempt := 0; attempt < 3; attempt++ {
			if err = p.PublishNotification(ctx, typ, []byte(body)); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-listener:
			if d.RoutingKey != "events.notification.update."+typ || string(d.Body) != body {
				t.Errorf("listener got %s %q", d.RoutingKey, d.Body)
			}
			// Each publication is a notification of its own for the bridge.
			if d.MessageId == "" || slices.Contains(ids, d.MessageId) {
				t.Errorf("message-id %q, after %v", d.MessageId, ids)
			}
			ids = append(ids, d.MessageId)
		case <-ctx.Done():
			t.Fatal("the notification did not arrive")
		}
	}
	if err := p.PublishNotification(ctx, "a.b", []byte(`{}`)); err == nil {
		t.Error("a type with a dot was published")
	}
}
