package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/migrations"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// The process tests run the lockstream binary itself, as a deployment does, and do
// to it what tests of the packages cannot: SIGKILL, a real ClickHouse server going
// away, a second process joining the consumer group.

// TestMain builds the binary into a directory of its own and fails the run if a
// test leaves a goroutine behind (goleak); the directory goes after the leak check.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lockstream-process-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating the binary directory:", err)
		os.Exit(1)
	}
	processBinary.dir = dir
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// killRecord is what the broker held the moment a consumer process died.
type killRecord struct {
	committed map[int32]int64 // the state group's committed readings offsets
	eventEnds map[int32]int64 // lockstream.events end offsets
}

// TestProcessConsumerSurvivesSIGKILL kills `lockstream consume` with SIGKILL three
// times while readings stream in, each time after its group committed 20 %, 45 %
// and 70 % of them and produced more events since, restarts it, and lets
// `lockstream history` run alongside. The final state is exact, every expected
// change is on lockstream.events (copies allowed, nothing else), every bad record is
// in the DLQ, and ClickHouse holds each change and valid reading once after FINAL.
func TestProcessConsumerSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	kafka := privateKafka(t)
	stores := storagetest.New(t)
	h := newHarness(t, storeSettings(kafka, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL, stores.RedisPrefix)...)
	client := streamtest.Client(t, kafka)
	o := offsets{t: t, client: client}

	// 2,000 sensors × 30 readings and 300 bad records, one round every 700 ms: the
	// stream outlasts the three crashes (the consumer commits every 5 s).
	registerFleet(t, stores.PostgresURL, 2000)
	rounds := fleetRounds(1, 2000, 30, 200)
	total := int64(0)
	for _, r := range rounds {
		total += int64(len(r))
	}
	prod := startProducer(t, client, kafka.ReadingsTopic(), rounds, 700*time.Millisecond, 0)

	hist := h.start("history", "history")
	proc := h.start("consume #1", "consume")
	var kills []killRecord
	for i, at := range []float64{0.20, 0.45, 0.70} {
		// The producer stays at most 25 % ahead of the crash point, so the stream
		// is never over before the crash.
		prod.allowFraction(at + 0.25)
		h.waitFor(fmt.Sprintf("the state group to commit %.0f %% of the readings", 100*at), func() (bool, string) {
			got := sum(o.committed(consumer.DefaultGroup, kafka.ReadingsTopic()))
			return float64(got) >= at*float64(total), fmt.Sprintf("committed %d of %d", got, total)
		})
		// Crash with work done but not committed: wait for events produced
		// after that commit, about two rounds' worth (a sensor's reading
		// replayed after a later one of it was stored is the interesting case),
		// but not for the next commit, due 5 s after the last.
		before := sum(o.ends(kafka.EventsTopic()))
		deadline := time.Now().Add(3500 * time.Millisecond)
		for sum(o.ends(kafka.EventsTopic())) < before+1500 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // poll interval
		}
		proc.kill()
		k := killRecord{committed: o.committed(consumer.DefaultGroup, kafka.ReadingsTopic()),
			eventEnds: o.ends(kafka.EventsTopic())}
		kills = append(kills, k)
		t.Logf("SIGKILL #%d: %d of %d readings committed, %d events produced", i+1, sum(k.committed), total, sum(k.eventEnds))
		evictMembers(t, client, consumer.DefaultGroup)
		proc = h.start(fmt.Sprintf("consume #%d", i+2), "consume")
	}

	records := prod.wait(t)
	h.waitFor("the state consumer to catch up", func() (bool, string) {
		return o.caughtUp(consumer.DefaultGroup, kafka.ReadingsTopic())
	})
	proc.stop()

	want := expectOutcome(records, readingTimes(t, kafka), streamtest.TopicID(t, kafka, kafka.ReadingsTopic()))
	checkState(t, stores.PostgresURL, want)
	events := checkEvents(t, kafka, want)
	checkDLQ(t, kafka, want)

	// Each crash should have lost processed but uncommitted work (events produced
	// from readings past the committed offset), which the next process consumed
	// again: that is the window the at-least-once design is about.
	replayed := 0
	for i, k := range kills {
		n := 0
		for _, e := range events {
			src := want.source[e.ID]
			if e.at.offset >= k.eventEnds[e.at.partition] || (i > 0 && e.at.offset < kills[i-1].eventEnds[e.at.partition]) {
				continue // not produced by the process this kill ended
			}
			if src.offset >= k.committed[src.partition] {
				n++
			}
		}
		t.Logf("SIGKILL #%d hit %d events produced from uncommitted readings", i+1, n)
		replayed += n
	}
	if replayed == 0 {
		t.Errorf("no SIGKILL hit processed but uncommitted readings: the crashes tested nothing")
	}
	unique := map[string]bool{}
	for _, e := range events {
		unique[e.ID] = true
	}
	t.Logf("lockstream.events: %d records, %d distinct changes", len(events), len(unique))

	h.waitFor("the history writer to catch up", func() (bool, string) {
		return o.caughtUp(history.DefaultGroup, kafka.ReadingsTopic(), kafka.EventsTopic())
	})
	hist.stop()
	checkHistory(t, stores.ClickHouseURL, want)
}

// TestProcessHistoryRidesOutClickHouseOutage runs `lockstream consume` and
// `lockstream history` against a private ClickHouse server and kills that server
// twice mid-stream. During the first outage (30 s) the state path keeps going and
// the history writer commits nothing; once the server is back the same writer
// catches up by itself. During the second, the history writer is killed too
// while it holds records it could not store, and a new one starts once the server
// is back: records must not have been committed before they were stored. In the
// end the history holds every valid reading and change, none twice.
func TestProcessHistoryRidesOutClickHouseOutage(t *testing.T) {
	t.Parallel()
	const outage = 30 * time.Second
	ch := startClickHouse(t)
	kafka := privateKafka(t)
	stores := storagetest.New(t) // Postgres and Redis; ClickHouse is the private one
	chURL := ch.URL("lockstream")
	ctx := context.Background()
	if err := migrations.Migrate(ctx, stores.PostgresURL, chURL, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("migrating the private ClickHouse: %v", err)
	}
	h := newHarness(t, storeSettings(kafka, stores.PostgresURL, chURL, stores.RedisURL, stores.RedisPrefix)...)
	client := streamtest.Client(t, kafka)
	o := offsets{t: t, client: client}
	const failedFlush = "history flush failed"

	registerFleet(t, stores.PostgresURL, 1000)
	rounds := fleetRounds(2, 1000, 30, 250)
	prod := startProducer(t, client, kafka.ReadingsTopic(), rounds, 500*time.Millisecond, 0)
	prod.allowFraction(0.3)
	consume := h.start("consume", "consume")
	hist := h.start("history #1", "history")
	h.waitFor("the history writer to store some readings", func() (bool, string) {
		got := sum(o.committed(history.DefaultGroup, kafka.ReadingsTopic()))
		return got > 0, "nothing committed yet"
	})

	// Outage 1: the writer rides it out.
	ch.kill()
	outageEnd := time.Now().Add(outage)
	statesBefore := stateOffsets(t, stores.PostgresURL)
	prod.allowFraction(0.7) // more of the stream arrives during the outage
	h.waitFor("the history writer to notice the outage", func() (bool, string) {
		return countLines(hist.out.String(), failedFlush) > 0, "no failed flush logged"
	})
	// What the writer stored before the outage may still be marked and not yet
	// committed: the next periodic commit sends it. From then on nothing may move.
	time.Sleep(stream.CommitInterval + time.Second)
	readingsAt := o.committed(history.DefaultGroup, kafka.ReadingsTopic())
	eventsAt := o.committed(history.DefaultGroup, kafka.EventsTopic())
	time.Sleep(time.Until(outageEnd)) // the outage itself: a deliberate pause

	if got := o.committed(history.DefaultGroup, kafka.ReadingsTopic()); !equalOffsets(got, readingsAt) {
		t.Errorf("history committed readings offsets %v during the outage (were %v)", got, readingsAt)
	}
	if got := o.committed(history.DefaultGroup, kafka.EventsTopic()); !equalOffsets(got, eventsAt) {
		t.Errorf("history committed events offsets %v during the outage (were %v)", got, eventsAt)
	}
	moved := 0
	for id, off := range stateOffsets(t, stores.PostgresURL) {
		if before, ok := statesBefore[id]; !ok || off > before {
			moved++
		}
	}
	if moved == 0 {
		t.Fatalf("sensor_state did not change during the ClickHouse outage")
	}
	t.Logf("during the %v outage %d sensors changed state; the history writer logged %d failed flushes",
		outage, moved, countLines(hist.out.String(), failedFlush))
	ch.start()
	h.waitFor("the history writer to catch up after the first outage", func() (bool, string) {
		return o.caughtUp(history.DefaultGroup, kafka.ReadingsTopic(), kafka.EventsTopic())
	})

	// Outage 2: the writer dies holding records it could not store.
	failures := countLines(hist.out.String(), failedFlush)
	ch.kill()
	prod.allowFraction(1)
	h.waitFor("the history writer to fail to store new records", func() (bool, string) {
		return countLines(hist.out.String(), failedFlush) > failures, "no new failed flush logged"
	})
	hist.kill()
	ch.start()
	evictMembers(t, client, history.DefaultGroup)
	hist = h.start("history #2", "history")

	records := prod.wait(t)
	h.waitFor("the state consumer to catch up", func() (bool, string) {
		return o.caughtUp(consumer.DefaultGroup, kafka.ReadingsTopic())
	})
	consume.stop()
	h.waitFor("the history writer to catch up after the second outage", func() (bool, string) {
		return o.caughtUp(history.DefaultGroup, kafka.ReadingsTopic(), kafka.EventsTopic())
	})
	hist.stop()

	want := expectOutcome(records, readingTimes(t, kafka), streamtest.TopicID(t, kafka, kafka.ReadingsTopic()))
	checkState(t, stores.PostgresURL, want)
	checkEvents(t, kafka, want)
	checkHistory(t, chURL, want)
}

// TestProcessConsumeStartsWhileClickHouseIsDown starts `lockstream consume` while
// ClickHouse does not answer. The state consumer never uses ClickHouse, so an
// outage of the history store must not keep it from (re)starting: "ClickHouse
// stopped mid-stream: the state path keeps going" has to hold across a consumer
// restart or scale-out too.
func TestProcessConsumeStartsWhileClickHouseIsDown(t *testing.T) {
	t.Parallel()
	kafka := privateKafka(t)
	stores := storagetest.New(t)
	downURL := fmt.Sprintf("clickhouse://127.0.0.1:%d/lockstream", freePort(t)) // nothing listens there
	h := newHarness(t, storeSettings(kafka, stores.PostgresURL, downURL, stores.RedisURL, stores.RedisPrefix)...)
	client := streamtest.Client(t, kafka)
	o := offsets{t: t, client: client}

	registerFleet(t, stores.PostgresURL, 200)
	prod := startProducer(t, client, kafka.ReadingsTopic(), fleetRounds(4, 200, 3, 50), 10*time.Millisecond, 3)
	records := prod.wait(t)
	consume := h.start("consume", "consume")
	h.waitFor("the state consumer to consume every reading", func() (bool, string) {
		return o.caughtUp(consumer.DefaultGroup, kafka.ReadingsTopic())
	})
	consume.stop()
	want := expectOutcome(records, readingTimes(t, kafka), streamtest.TopicID(t, kafka, kafka.ReadingsTopic()))
	checkState(t, stores.PostgresURL, want)
	checkEvents(t, kafka, want)
}

// TestProcessConsumerRebalance starts a second `lockstream consume` mid-stream,
// waits until it has taken and committed partitions, then stops it (SIGTERM); the
// first process takes its partitions back. The final state is still exact and no
// change is missing.
func TestProcessConsumerRebalance(t *testing.T) {
	t.Parallel()
	kafka := privateKafka(t)
	stores := storagetest.New(t)
	h := newHarness(t, storeSettings(kafka, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL, stores.RedisPrefix)...)
	client := streamtest.Client(t, kafka)
	o := offsets{t: t, client: client}

	registerFleet(t, stores.PostgresURL, 2000)
	rounds := fleetRounds(3, 2000, 30, 200)
	total := int64(0)
	for _, r := range rounds {
		total += int64(len(r))
	}
	prod := startProducer(t, client, kafka.ReadingsTopic(), rounds, 500*time.Millisecond, 0)
	prod.allowFraction(0.5)
	a := h.start("consume A", "consume")
	h.waitFor("A to commit 20 % of the readings", func() (bool, string) {
		got := sum(o.committed(consumer.DefaultGroup, kafka.ReadingsTopic()))
		return float64(got) >= 0.2*float64(total), fmt.Sprintf("committed %d of %d", got, total)
	})

	b := h.start("consume B", "consume")
	var bParts []int32
	h.waitFor("B to be assigned partitions", func() (bool, string) {
		bParts = assignedPartitions(b.out.String())
		return len(bParts) > 0, "no assignment logged by B"
	})
	bStart := o.committed(consumer.DefaultGroup, kafka.ReadingsTopic())
	prod.allowFraction(0.8)
	h.waitFor("B to commit progress on its partitions", func() (bool, string) {
		got := o.committed(consumer.DefaultGroup, kafka.ReadingsTopic())
		for _, p := range bParts {
			if got[p] <= bStart[p] {
				return false, fmt.Sprintf("partition %d still at %d", p, got[p])
			}
		}
		return true, ""
	})
	t.Logf("B took partitions %v and committed on each of them", bParts)
	aAssigned := countLines(a.out.String(), `msg="partitions assigned"`)
	b.stop()
	h.waitFor("A to take B's partitions back", func() (bool, string) {
		n := countLines(a.out.String(), `msg="partitions assigned"`)
		return n > aAssigned, "A logged no new assignment"
	})

	records := prod.wait(t)
	h.waitFor("A to catch up", func() (bool, string) {
		return o.caughtUp(consumer.DefaultGroup, kafka.ReadingsTopic())
	})
	a.stop()

	want := expectOutcome(records, readingTimes(t, kafka), streamtest.TopicID(t, kafka, kafka.ReadingsTopic()))
	checkState(t, stores.PostgresURL, want)
	checkEvents(t, kafka, want)
	checkDLQ(t, kafka, want)
}

// stateOffsets returns each sensor's stored source offset.
func stateOffsets(t *testing.T, pgURL string) map[string]int64 {
	t.Helper()
	states := storagetest.AllSensorStates(t, pgURL)
	out := make(map[string]int64, len(states))
	for _, s := range states {
		out[s.SensorID] = s.Offset
	}
	return out
}

func equalOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for p, v := range a {
		if w, ok := b[p]; !ok || w != v {
			return false
		}
	}
	return true
}
