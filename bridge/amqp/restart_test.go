package amqp_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lockstream/lockstream/bridge/amqp"
	"github.com/lockstream/lockstream/bridge/bridgetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// produceGate holds every produce request of a kfake cluster (here only the
// bridge produces) until opened, so that the bridge has messages in hand
// (received, not yet acked) when the test restarts the broker.
type produceGate struct {
	mu     sync.Mutex
	opened chan struct{}
	once   sync.Once
	held   int
}

func holdProduces(cluster *kfake.Cluster) *produceGate {
	g := &produceGate{opened: make(chan struct{})}
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case <-g.opened:
		default:
			g.mu.Lock()
			g.held++
			g.mu.Unlock()
			// Yields the broker to other connections; the request is then
			// handled as usual.
			cluster.SleepControl(func() { <-g.opened })
		}
		return nil, nil, false
	})
	return g
}

func (g *produceGate) heldRequests() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

func (g *produceGate) open() { g.once.Do(func() { close(g.opened) }) }

// TestReconnectsAfterBrokerRestart restarts RabbitMQ (stop_app, start_app:
// the broker application goes and comes back, the port closes, the quorum
// queue recovers from disk) while the bridge holds readings it received but
// has not produced yet: the bridge sees the connection go (connected 0),
// reconnects once the broker is back (connected 1), and every reading
// published before the restart and after it reaches Kafka; the copies are the
// messages it had in hand, which the broker redelivered. The broker is a node
// of the test's own (bridgetest.StartNode): stopping the shared one would
// break every test and process using it at that moment.
func TestReconnectsAfterBrokerRestart(t *testing.T) {
	t.Parallel()
	node := bridgetest.StartNode(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	kafka := stream.Config{Brokers: cluster.ListenAddrs(), Partitions: 3}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := stream.EnsureTopics(ctx, streamtest.Client(t, kafka), kafka); err != nil {
		t.Fatalf("creating topics: %v", err)
	}
	b := setup(t, kafka, nil, nil, func(c *amqp.Config) {
		c.URL = node.URL
		c.HandleTimeout = 10 * time.Minute // held produces stay in hand
	})
	if typ := node.QueueType(b.cfg.Queue); typ != "quorum" {
		t.Fatalf("the bridge's queue is %s, want a quorum queue", typ)
	}
	const n = 600
	reading := func(i int) []byte { return fmt.Appendf(nil, `{"sensor_id":"rs%d","data":%d}`, i, i%2) }

	gate := holdProduces(cluster)
	t.Cleanup(gate.open) // before the bridge stops: it finishes what it holds
	for i := range n / 2 {
		b.pub.Publish(readingKey, reading(i))
	}
	bridgetest.WaitFor(t, wait, "the bridge to hold a prefetch of readings", func() (bool, string) {
		got := b.value("lockstream_amqp_received_total")
		return got >= float64(b.cfg.Prefetch) && gate.heldRequests() > 0,
			fmt.Sprintf("received_total %v, produce requests held %d", got, gate.heldRequests())
	})
	if got := b.value("lockstream_amqp_produced_total"); got != 0 {
		t.Fatalf("produced_total %v before the restart, want 0: the produces are held", got)
	}

	node.StopApp()
	bridgetest.WaitFor(t, wait, "the bridge to see the broker go", func() (bool, string) {
		return b.value("lockstream_amqp_connected") == 0, "lockstream_amqp_connected is 1"
	})
	// The readings in hand reach Kafka now; their acks have no connection.
	gate.open()
	node.StartApp()
	b.waitConnected()

	// The publisher's connection went with the broker: a new one.
	pub := bridgetest.DialAMQPURL(t, node.URL).Publisher(b.cfg.Exchange)
	for i := n / 2; i < n; i++ {
		pub.Publish(readingKey, reading(i))
	}
	waitRecords(t, kafka, kafka.ReadingsTopic(), n)
	bridgetest.WaitFor(t, wait, "the queue to empty", func() (bool, string) {
		got := node.QueueMessages(b.cfg.Queue)
		return got == 0, fmt.Sprintf("%d messages left", got)
	})
	// Read once the queue is empty: the redelivered copies are all in.
	records := streamtest.ReadAll(t, kafka, kafka.ReadingsTopic())
	copies := map[string]int{}
	for _, r := range records {
		copies[string(r.Key)]++
	}
	for i := range n {
		if copies["rs"+strconv.Itoa(i)] == 0 {
			t.Errorf("reading rs%d lost across the restart", i)
		}
	}
	redelivered := b.value("lockstream_amqp_redelivered_total")
	if redelivered == 0 {
		t.Error("redelivered_total 0: the broker redelivered none of the messages the bridge had in hand")
	}
	if extra := len(records) - n; float64(extra) > redelivered {
		t.Errorf("%d copies beyond the %d readings, more than the %v redelivered messages", extra, n, redelivered)
	}
	t.Logf("%d readings, %d records (%v redelivered after the restart)", n, len(records), redelivered)
}
