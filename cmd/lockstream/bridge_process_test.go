package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstream/lockstream/bridge/bridgetest"
	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/reading"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// bridgeEnv points a bridge process at the local RabbitMQ and Mosquitto, on an
// exchange, queue, topic and MQTT session of the test's own; it returns the
// settings and the names.
type bridgeNames struct {
	exchange, queue, topicPrefix, clientID string
}

func bridgeEnv(t *testing.T) ([]string, bridgeNames) {
	t.Helper()
	broker := bridgetest.DialAMQP(t)
	suffix := bridgetest.Suffix(t)
	n := bridgeNames{exchange: "lstest." + suffix, queue: "lstest.recorder." + suffix,
		topicPrefix: "lstest/" + suffix + "/readings/", clientID: "lstest-bridge-" + suffix}
	broker.Exchange(n.exchange)
	broker.DeleteQueueAtEnd(n.queue)
	bridgetest.EndSession(t, n.clientID)
	return []string{
		"LOCKSTREAM_AMQP_URL=" + broker.URL,
		"LOCKSTREAM_AMQP_EXCHANGE=" + n.exchange,
		"LOCKSTREAM_AMQP_QUEUE=" + n.queue,
		"LOCKSTREAM_MQTT_URL=" + bridgetest.MQTTURL(t),
		"LOCKSTREAM_MQTT_TOPIC=" + n.topicPrefix + "+",
		"LOCKSTREAM_MQTT_CLIENT_ID=" + n.clientID,
	}, n
}

// bridgeFleet is what the tests publish: per bridge, rounds of readings of its own
// sensors (a random first state, then a flip a third of the time).
type bridgeFleet struct {
	amqp, mqtt [][2]string // sensor id, data ("0" or "1")
}

func newBridgeFleet(seed uint64, sensors, rounds int) bridgeFleet {
	rng := rand.New(rand.NewPCG(seed, seed))
	gen := func(prefix string) [][2]string {
		last := make([]int, sensors)
		var out [][2]string
		for r := range rounds {
			for _, i := range rng.Perm(sensors) {
				if r == 0 {
					last[i] = rng.IntN(2)
				} else if rng.IntN(3) == 0 {
					last[i] = 1 - last[i]
				}
				out = append(out, [2]string{fmt.Sprintf("%s%04d", prefix, i), strconv.Itoa(last[i])})
			}
		}
		return out
	}
	return bridgeFleet{amqp: gen("amq"), mqtt: gen("mqt")}
}

// last returns each sensor's last published state.
func (f bridgeFleet) last() map[string]int {
	out := map[string]int{}
	for _, r := range append(append([][2]string(nil), f.amqp...), f.mqtt...) {
		out[r[0]], _ = strconv.Atoi(r[1])
	}
	return out
}

// fleetTS is the device time of a fleet's i-th reading: unique per sensor, so
// that each published reading can be found on the readings topic.
func fleetTS(i int) int64 { return 1795341600000 + int64(i) }

// publishFleet publishes f's readings, AMQP and MQTT at once, each at most rate
// a second (0: as fast as the brokers confirm); with bare, every fifth MQTT
// reading is a bare 0 or 1 (one without the device time that names it).
// progress counts what was published.
func publishFleet(t *testing.T, f bridgeFleet, names bridgeNames, rate int, bare bool, progress *atomic.Int64) *sync.WaitGroup {
	t.Helper()
	pub := bridgetest.DialAMQP(t).Publisher(names.exchange)
	mq := bridgetest.DialMQTT(t)
	var wg sync.WaitGroup
	pace := func(i int, start time.Time) {
		if rate > 0 {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))))
		}
	}
	wg.Go(func() {
		start := time.Now()
		for i, r := range f.amqp {
			pace(i, start)
			if !pub.Publish("events.sensor.update.reading", fmt.Appendf(nil, `{"sensor_id":%q,"data":%s,"ts":%d}`, r[0], r[1], fleetTS(i))) {
				return
			}
			progress.Add(1)
		}
	})
	wg.Go(func() {
		start := time.Now()
		for i, r := range f.mqtt {
			pace(i, start)
			payload := fmt.Sprintf(`{"sensor_id":%q,"data":%s,"ts":%d}`, r[0], r[1], fleetTS(i))
			if bare && i%5 == 0 {
				payload = r[1]
			}
			if !mq.Publish(names.topicPrefix+r[0], []byte(payload)) {
				return
			}
			progress.Add(1)
		}
	})
	return &wg
}

// readingsOnTopic reads the readings topic back as the produced records the
// outcome helpers take, validated as the consumer validates them.
func readingsOnTopic(t *testing.T, kafka stream.Config) []produced {
	t.Helper()
	var out []produced
	for _, r := range streamtest.ReadAll(t, kafka, kafka.ReadingsTopic()) {
		p := produced{record: record{key: r.Key, value: r.Value}, partition: r.Partition, offset: r.Offset}
		rd, err := reading.Parse(r.Key, r.Value)
		if err != nil {
			t.Fatalf("the bridge produced an invalid reading %q: %v", r.Value, err)
		}
		p.sensor, p.data = rd.SensorID, rd.Data
		out = append(out, p)
	}
	return out
}

// TestProcessBridgeReadingsChangeState runs `lockstream bridge` (AMQP and MQTT)
// and `lockstream consume` as processes: readings published to RabbitMQ and to
// Mosquitto change sensor state exactly as readings on Kafka do — the state and
// events the consumer makes of the readings topic are those of a Kafka stream of
// the same records — and each sensor ends in the state it was last published in
// (each bridge keeps a sensor's readings in order).
func TestProcessBridgeReadingsChangeState(t *testing.T) {
	t.Parallel()
	kafka := privateKafka(t)
	stores := storagetest.New(t)
	env, names := bridgeEnv(t)
	h := newHarness(t, append(storeSettings(kafka, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL, stores.RedisPrefix), env...)...)
	o := offsets{t: t, client: streamtest.Client(t, kafka)}

	fleet := newBridgeFleet(7, 150, 8)
	var ids []string
	for sensor := range fleet.last() {
		ids = append(ids, sensor)
	}
	storagetest.CreateSensors(t, stores.PostgresURL, ids...) // only registered sensors have a state

	h.start("consume", "consume")
	bridge := h.start("bridge", "bridge")
	h.waitFor("the bridges to subscribe", func() (bool, string) {
		out := bridge.out.String()
		return strings.Contains(out, `msg="amqp bridge consuming"`) && strings.Contains(out, `msg="mqtt subscribed"`), "not yet"
	})
	var published atomic.Int64
	publishFleet(t, fleet, names, 0, true, &published).Wait()
	total := int64(len(fleet.amqp) + len(fleet.mqtt))
	h.waitFor("every reading on the readings topic", func() (bool, string) {
		n := sum(o.ends(kafka.ReadingsTopic()))
		return n >= total, fmt.Sprintf("%d of %d", n, total)
	})
	h.waitFor("the state consumer to catch up", func() (bool, string) {
		return o.caughtUp(consumer.DefaultGroup, kafka.ReadingsTopic())
	})
	bridge.stop()

	records := readingsOnTopic(t, kafka)
	want := expectOutcome(records, readingTimes(t, kafka), streamtest.TopicID(t, kafka, kafka.ReadingsTopic()))
	checkState(t, stores.PostgresURL, want)
	checkEvents(t, kafka, want)
	for sensor, data := range fleet.last() {
		if got, ok := want.final[sensor]; !ok || got.Data != data {
			t.Errorf("%s ends in state %+v, last published %d", sensor, got, data)
		}
	}
	if len(records) != int(total) {
		t.Logf("%d readings published, %d on the topic (copies of redelivered messages)", total, len(records))
	}
}

// TestProcessBridgeSurvivesSIGKILL kills `lockstream bridge` with SIGKILL twice
// while readings stream in over AMQP and MQTT, and starts it again each time:
// every published reading reaches the readings topic (copies allowed).
func TestProcessBridgeSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	kafka := privateKafka(t)
	env, names := bridgeEnv(t)
	h := newHarness(t, append([]string{
		"LOCKSTREAM_KAFKA_BROKERS=" + strings.Join(kafka.Brokers, ","),
		"LOCKSTREAM_KAFKA_PARTITIONS=" + strconv.Itoa(kafka.Partitions),
		"LOCKSTREAM_LOG_LEVEL=info",
	}, env...)...)
	o := offsets{t: t, client: streamtest.Client(t, kafka)}
	subscribed := func(p *proc) {
		h.waitFor("the bridges to subscribe", func() (bool, string) {
			out := p.out.String()
			return strings.Contains(out, `msg="amqp bridge consuming"`) && strings.Contains(out, `msg="mqtt subscribed"`), "not yet"
		})
	}
	p := h.start("bridge #1", "bridge")
	subscribed(p)

	// 2 × 2,000 readings at 150/s per broker: about 13 s of stream. While a
	// bridge is down Mosquitto queues at most 1,000 messages of its session
	// (max_queued_messages), in-flight ones included: 150/s keeps a restart well
	// under that.
	fleet := newBridgeFleet(11, 250, 8)
	total := int64(len(fleet.amqp) + len(fleet.mqtt))
	var published atomic.Int64
	done := publishFleet(t, fleet, names, 150, false, &published)
	for i, at := range []float64{0.3, 0.6} {
		h.waitFor(fmt.Sprintf("%.0f %% published", 100*at), func() (bool, string) {
			n := published.Load()
			return float64(n) >= at*float64(total), fmt.Sprintf("%d of %d", n, total)
		})
		p.kill()
		t.Logf("SIGKILL #%d with %d of %d published, %d on the topic", i+1, published.Load(), total, sum(o.ends(kafka.ReadingsTopic())))
		p = h.start(fmt.Sprintf("bridge #%d", i+2), "bridge")
		subscribed(p)
	}
	done.Wait()
	var lost []string
	copies := 0
	h.waitFor("every published reading on the readings topic", func() (bool, string) {
		if n := sum(o.ends(kafka.ReadingsTopic())); n < total {
			return false, fmt.Sprintf("%d of %d readings", n, total)
		}
		lost, copies = missingReadings(t, kafka, fleet)
		if len(lost) > 0 {
			time.Sleep(500 * time.Millisecond) // poll interval: reading the topic back is not cheap
		}
		return len(lost) == 0, fmt.Sprintf("%d missing, first %v", len(lost), lost[:min(10, len(lost))])
	})
	p.stop()
	t.Logf("all %d readings on the topic, %d copies of redelivered ones", total, copies)
}

// missingReadings returns the fleet's readings not on the readings topic, and
// how many copies of readings the topic holds.
func missingReadings(t *testing.T, kafka stream.Config, fleet bridgeFleet) (lost []string, copies int) {
	t.Helper()
	onTopic := map[string]int{}
	for _, r := range streamtest.ReadAll(t, kafka, kafka.ReadingsTopic()) {
		rd, err := reading.Parse(r.Key, r.Value)
		if err != nil {
			t.Fatalf("the bridge produced an invalid reading %q: %v", r.Value, err)
		}
		onTopic[fmt.Sprintf("%s=%d@%d", rd.SensorID, rd.Data, rd.TS.UnixMilli())]++
	}
	for _, readings := range [][][2]string{fleet.amqp, fleet.mqtt} {
		for i, r := range readings {
			key := fmt.Sprintf("%s=%s@%d", r[0], r[1], fleetTS(i))
			if n := onTopic[key]; n == 0 {
				lost = append(lost, key)
			} else {
				copies += n - 1
			}
		}
	}
	return lost, copies
}
