package main

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/reading"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// The process tests of issue 10's hardening of the state consumer: each runs
// `lockstream consume` as a process of its own.

// vmRSS returns the resident memory of process pid, in bytes (VmRSS of
// /proc/<pid>/status).
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS line %q: %v", sc.Text(), err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// redisKeys counts the keys under prefix.
func redisKeys(t *testing.T, url, prefix string) int {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// countHeartbeats returns the members of the heartbeat's deadline set and lost
// hash.
func countHeartbeats(t *testing.T, r *storage.Redis) (tracked, lost int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tracked, lost, err := heartbeat.NewRedisStore(r).CountHeartbeats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tracked, lost
}

// produceUnregistered produces n readings of n distinct ids u<first>…, none of
// them registered.
func produceUnregistered(t *testing.T, client *kgo.Client, topic string, first, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), processWait)
	defer cancel()
	errc := make(chan error, 1)
	for i := first; i < first+n; i++ {
		id := "u" + strconv.FormatInt(int64(i), 36)
		client.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(id),
			Value: fmt.Appendf(nil, `{"sensor_id":%q,"data":%d}`, id, i%2)}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	if err := client.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		t.Fatalf("producing unregistered readings: %v", err)
	default:
	}
}

// TestProcessUnregisteredSensorsCostNothingThatGrows sends 500,000 readings of
// 500,000 distinct unregistered ids through `lockstream consume`: the Redis keys
// under its prefix, the members of the heartbeat's deadline set and lost hash (a
// sighting would be a member there, not a key) and the sensor_state rows stay as
// they were, and the process's resident memory stays within 50 MB of where it
// was once up, before any of them, while the ids seen are counted in the hourly
// summary.
func TestProcessUnregisteredSensorsCostNothingThatGrows(t *testing.T) {
	t.Parallel()
	kafka := privateKafka(t)
	stores := storagetest.New(t)
	registerFleet(t, stores.PostgresURL, 10)
	h := newHarness(t, storeSettings(kafka, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL, stores.RedisPrefix)...)
	client := streamtest.Client(t, kafka, kgo.MaxBufferedRecords(200_000))
	o := offsets{t: t, client: client}
	topic := kafka.ReadingsTopic()

	// Registered sensors have their state and sightings.
	for i := range 10 {
		id := fmt.Sprintf("lock%05d", i)
		if err := client.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte(id),
			Value: fmt.Appendf(nil, `{"sensor_id":%q,"data":1}`, id)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	consume := h.start("consume", "consume")
	h.waitFor("the registered sensors' readings to be consumed", func() (bool, string) {
		return o.caughtUp(consumer.DefaultGroup, topic)
	})
	states := len(storagetest.AllSensorStates(t, stores.PostgresURL))
	keys := redisKeys(t, stores.RedisURL, stores.RedisPrefix)
	tracked, lost := countHeartbeats(t, stores.Redis)
	if states != 10 || tracked != 10 || lost != 0 {
		t.Fatalf("after the registered readings: %d sensor_state rows, %d deadlines, %d lost; want 10, 10, 0",
			states, tracked, lost)
	}
	// The baseline is the process up and idle, so the growth measured includes
	// what the first large batches size (fetch buffers, caches): 15 MB in all
	// (35 -> 50 MB) when this was written, well within the 50 MB allowed.
	pid := consume.cmd.Process.Pid
	before := vmRSS(t, pid)

	produceUnregistered(t, client, topic, 0, 500_000)
	h.waitFor("the 500,000 readings to be consumed", func() (bool, string) {
		return o.caughtUp(consumer.DefaultGroup, topic)
	})
	after := vmRSS(t, pid)
	t.Logf("consume's VmRSS: %d MB once up, %d MB after the 500,000 unregistered readings", before>>20, after>>20)
	if after-before > 50<<20 {
		t.Errorf("consume's resident memory grew by %d MB (from %d MB), want at most 50", (after-before)>>20, before>>20)
	}
	if got := len(storagetest.AllSensorStates(t, stores.PostgresURL)); got != states {
		t.Errorf("sensor_state holds %d rows after the unregistered readings, want %d", got, states)
	}
	if got := redisKeys(t, stores.RedisURL, stores.RedisPrefix); got != keys {
		t.Errorf("%d Redis keys under %q after the unregistered readings, want %d", got, stores.RedisPrefix, keys)
	}
	if gotTracked, gotLost := countHeartbeats(t, stores.Redis); gotTracked != tracked || gotLost != lost {
		t.Errorf("heartbeat deadlines %d (ZCARD) and lost %d (HLEN) after the unregistered readings, want %d and %d",
			gotTracked, gotLost, tracked, lost)
	}
	// Counted: the summary holds ids of the hour (at most 2,000 per process).
	h.waitFor("the unregistered ids to be summarised", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		top, err := consumer.NewPostgresStore(stores.Postgres).TopUnregistered(ctx, time.Now().Add(-time.Hour), 1000)
		if err != nil {
			return false, err.Error()
		}
		var sum int64
		for _, u := range top {
			sum += u.Count
		}
		return len(top) == 1000 && sum > 0, fmt.Sprintf("%d ids listed", len(top))
	})
	consume.stop()
}

// deleteTopic deletes topic and waits until the broker no longer lists it.
func deleteTopic(t *testing.T, client *kgo.Client, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), processWait)
	defer cancel()
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.TopicNames = append(req.TopicNames, topic)
	resp, err := req.RequestWith(ctx, client)
	if err != nil {
		t.Fatalf("deleting %s: %v", topic, err)
	}
	for _, r := range resp.Topics {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("deleting %s: %v", topic, err)
		}
	}
}

// TestProcessRecreatedTopicIsApplied consumes readings of a sensor, deletes and
// creates lockstream.readings again, and produces a reading to the new topic at
// an offset the old one had passed: `lockstream consume` applies it (the stored
// position belongs to the old topic id) instead of skipping it as a replay, and
// its event has an id of its own.
func TestProcessRecreatedTopicIsApplied(t *testing.T) {
	t.Parallel()
	kafka := privateKafka(t)
	stores := storagetest.New(t)
	storagetest.CreateSensors(t, stores.PostgresURL, "door1")
	h := newHarness(t, storeSettings(kafka, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL, stores.RedisPrefix)...)
	client := streamtest.Client(t, kafka, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	topic := kafka.ReadingsTopic()
	ctx, cancel := context.WithTimeout(context.Background(), processWait)
	defer cancel()
	produce := func(client *kgo.Client, data ...int) {
		t.Helper()
		for _, d := range data {
			if err := client.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte("door1"),
				Value: fmt.Appendf(nil, `{"sensor_id":"door1","data":%d}`, d)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	state := func() storagetest.SensorState {
		for _, s := range storagetest.AllSensorStates(t, stores.PostgresURL) {
			if s.SensorID == "door1" {
				return s
			}
		}
		return storagetest.SensorState{Offset: -1}
	}

	oldID := streamtest.TopicID(t, kafka, topic)
	produce(client, 0, 1, 0, 1, 1)
	consume := h.start("consume #1", "consume")
	h.waitFor("the first topic's readings", func() (bool, string) {
		s := state()
		return s.Offset == 3 && s.Data == 1, fmt.Sprintf("state %+v", s)
	})
	consume.stop()

	deleteTopic(t, client, topic)
	h.waitFor("the topic to be created again", func() (bool, string) {
		err := stream.EnsureTopics(ctx, client, kafka)
		if err != nil {
			return false, err.Error()
		}
		id := streamtest.TopicID(t, kafka, topic)
		return id != oldID, "the old topic id"
	})
	newID := streamtest.TopicID(t, kafka, topic)
	// A client of its own: the first one knows the old topic id.
	produce(streamtest.Client(t, kafka, kgo.RecordPartitioner(kgo.ManualPartitioner())), 0)
	h.start("consume #2", "consume")
	h.waitFor("the new topic's reading to be applied", func() (bool, string) {
		s := state()
		return s.TopicID == newID && s.Offset == 0 && s.Data == 0, fmt.Sprintf("state %+v", s)
	})
	// Its state_changed (1 → 0) is on the events topic with an id of its own.
	h.waitFor("the new reading's event", func() (bool, string) {
		ids := map[string]bool{}
		for _, r := range streamtest.ReadAll(t, kafka, kafka.EventsTopic()) {
			e, err := event.Decode(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			if e.Data != nil && *e.Data == 0 && e.Previous != nil && *e.Previous == 1 {
				ids[e.ID] = true
			}
		}
		// Offset 2 of the old topic (1 → 0) and offset 0 of the new one.
		return len(ids) == 2 && ids[event.StateChangedID("door1", newID, 0, 0)], fmt.Sprintf("changes to 0 after 1: %v", ids)
	})
}

// TestProcessOversizeRecordGoesToTheDLQ produces a record at the broker's size
// limit (kfake enforces Kafka's default max.message.bytes, 1,048,588 bytes, as
// the record batch's size) followed by a good reading on the same partition:
// `lockstream consume` sends the record to the DLQ with its value cut to fit and
// its size in original-size, and applies the good reading.
func TestProcessOversizeRecordGoesToTheDLQ(t *testing.T) {
	t.Parallel()
	kafka := privateKafka(t)
	stores := storagetest.New(t)
	storagetest.CreateSensors(t, stores.PostgresURL, "door1")
	h := newHarness(t, storeSettings(kafka, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL, stores.RedisPrefix)...)
	client := streamtest.Client(t, kafka, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1_048_588), kgo.ProducerBatchCompression(kgo.NoCompression()))
	topic := kafka.ReadingsTopic()
	ctx, cancel := context.WithTimeout(context.Background(), processWait)
	defer cancel()

	// Random bytes do not compress: the record is as large on the way back.
	const maxMessageBytes = 1_048_588
	big := make([]byte, maxMessageBytes-200)
	_, _ = crand.Read(big)
	if err := client.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte("door1"), Value: big}).FirstErr(); err != nil {
		t.Fatalf("producing a record just under the broker's limit: %v", err)
	}
	// A record over the limit is refused by the broker itself (this client
	// would send batches of up to 2 MiB).
	loose := streamtest.Client(t, kafka, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(2<<20), kgo.ProducerBatchCompression(kgo.NoCompression()))
	over := make([]byte, maxMessageBytes)
	if err := loose.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte("door1"), Value: over}).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("producing a record over max.message.bytes: %v, want MESSAGE_TOO_LARGE from the broker", err)
	}
	if err := client.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte("door1"),
		Value: []byte(`{"sensor_id":"door1","data":1}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	h.start("consume", "consume")
	h.waitFor("the good reading after the oversize record to be applied", func() (bool, string) {
		for _, s := range storagetest.AllSensorStates(t, stores.PostgresURL) {
			if s.SensorID == "door1" && s.Data == 1 && s.Offset == 1 {
				return true, ""
			}
		}
		return false, "no state from offset 1"
	})
	dlq := streamtest.ReadAll(t, kafka, kafka.DLQTopic())
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d records, want 1", len(dlq))
	}
	headers := map[string]string{}
	for _, hd := range dlq[0].Headers {
		headers[hd.Key] = string(hd.Value)
	}
	switch {
	case headers[reading.HeaderError] != reading.ReasonTooLarge:
		t.Errorf("DLQ reason %q, want %s", headers[reading.HeaderError], reading.ReasonTooLarge)
	case headers[reading.HeaderSource] != topic+"/0/0":
		t.Errorf("DLQ source %q, want %s/0/0", headers[reading.HeaderSource], topic)
	case headers[consumer.HeaderOriginalSize] != strconv.Itoa(len(big)):
		t.Errorf("DLQ original-size %q, want %d", headers[consumer.HeaderOriginalSize], len(big))
	case len(dlq[0].Value) >= len(big) || !bytes.HasPrefix(big, dlq[0].Value):
		t.Errorf("DLQ value is %d bytes, want a cut prefix of the %d", len(dlq[0].Value), len(big))
	}
}
