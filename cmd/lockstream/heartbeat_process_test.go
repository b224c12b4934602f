package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// stallTimeout is the heartbeat timeout of the stall test: short, so that the
// stall outlasts it twice in seconds, and long enough that a loaded machine never
// keeps the test's own producer silent for that long.
const stallTimeout = 4 * time.Second

// TestProcessHeartbeatSurvivesConsumerStall runs `lockstream consume` and
// `lockstream heartbeat` as separate processes and stops the consumer with SIGSTOP
// for twice the heartbeat timeout while the reporting sensors keep publishing,
// then continues it. The heartbeat judges silence by how far consumption has got,
// so nothing is declared lost during the stall; afterwards each silent sensor is
// lost exactly once, the reporting ones never; a sensor that comes back gets its
// restore after its loss, timed after it; and every loss is honest: no reading of
// the sensor in the timeout before it.
func TestProcessHeartbeatSurvivesConsumerStall(t *testing.T) {
	t.Parallel()
	kafka := privateKafka(t)
	stores := storagetest.New(t)
	metricsAddr := freeAddr(t)
	h := newHarness(t, append(storeSettings(kafka, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL, stores.RedisPrefix),
		"LOCKSTREAM_HEARTBEAT_TIMEOUT="+stallTimeout.String(),
		"LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL=200ms",
		"LOCKSTREAM_METRICS_ADDR="+metricsAddr,
	)...)

	// Reporters report throughout; silent ones stop when the consumer stops and
	// never come back; back ones stop then and come back after their loss; late
	// ones stop once all that is over, and their losses show the sweep judged
	// everything up to then.
	groups := map[string][]string{}
	for _, g := range []struct {
		name string
		n    int
	}{{"rep", 20}, {"sil", 5}, {"back", 5}, {"late", 5}} {
		for i := range g.n {
			groups[g.name] = append(groups[g.name], g.name+strconv.Itoa(i))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), processWait)
	defer cancel()
	var all []string
	for _, ids := range groups {
		for _, id := range ids {
			if _, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: id, Address: "test"}); err != nil {
				t.Fatal(err)
			}
			all = append(all, id)
		}
	}

	client := streamtest.Client(t, kafka)
	o := offsets{t: t, client: client}
	events := startEventLog(t, kafka)
	fleet := startFleet(t, client, kafka.ReadingsTopic(), 250*time.Millisecond)
	fleet.set(true, all...)
	consume := h.start("consume", "consume", "--metrics-addr=") // the heartbeat serves the metrics address
	h.start("heartbeat", "heartbeat")

	var twoRounds map[int32]int64 // end offsets once two rounds were produced
	h.waitFor("the consumer to commit two rounds of every sensor", func() (bool, string) {
		if twoRounds == nil {
			if fleet.roundsDone() < 2 {
				return false, "fewer than two rounds produced"
			}
			twoRounds = o.ends(kafka.ReadingsTopic())
		}
		return o.caughtUpTo(consumer.DefaultGroup, kafka.ReadingsTopic(), twoRounds)
	})

	fleet.set(false, groups["sil"]...)
	fleet.set(false, groups["back"]...)
	if err := consume.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	h.waitFor("a stall of twice the timeout, measured by the heartbeat", func() (bool, string) {
		m, err := scrapeMetrics("http://" + metricsAddr + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		lag := m["lockstream_heartbeat_watermark_lag_seconds"]
		stalled := time.Since(stopped)
		return stalled >= 2*stallTimeout && lag >= (2*stallTimeout).Seconds(),
			fmt.Sprintf("stalled %v, heartbeat measured a lag of %.1f s", stalled.Round(time.Millisecond), lag)
	})
	if lost := events.ofType(t, event.ConnectionLost); len(lost) != 0 {
		t.Fatalf("during the stall the heartbeat declared %d sensors lost: %v", len(lost), slices.Sorted(maps.Keys(lost)))
	}
	if err := consume.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	waitForEach := func(what string, typ event.Type, sensors []string) {
		t.Helper()
		h.waitFor(what, func() (bool, string) {
			got := events.ofType(t, typ)
			for _, s := range sensors {
				if len(got[s]) == 0 {
					return false, fmt.Sprintf("no %s of %s yet", typ, s)
				}
			}
			return true, ""
		})
	}
	waitForEach("the silent sensors' losses", event.ConnectionLost, append(append([]string(nil), groups["sil"]...), groups["back"]...))
	fleet.set(true, groups["back"]...)
	waitForEach("the back sensors' restores", event.ConnectionRestored, groups["back"])
	fleet.set(false, groups["late"]...)
	waitForEach("the late sensors' losses", event.ConnectionLost, groups["late"])
	readings := fleet.stop(t)

	lost, restored := events.ofType(t, event.ConnectionLost), events.ofType(t, event.ConnectionRestored)
	for _, s := range groups["rep"] {
		if len(lost[s]) != 0 || len(restored[s]) != 0 {
			t.Errorf("reporting sensor %s: %d losses, %d restores, want none", s, len(lost[s]), len(restored[s]))
		}
	}
	for _, g := range []string{"sil", "back", "late"} {
		for _, s := range groups[g] {
			if n := distinctIDs(lost[s]); n != 1 {
				t.Errorf("%s sensor %s: %d losses, want exactly one", g, s, n)
				continue
			}
			checkHonestLoss(t, lost[s][0], readings[s])
			wantRestores := 0
			if g == "back" {
				wantRestores = 1
			}
			if n := distinctIDs(restored[s]); n != wantRestores {
				t.Errorf("%s sensor %s: %d restores, want %d", g, s, n, wantRestores)
			}
		}
	}
	for _, s := range groups["back"] {
		if len(lost[s]) == 0 || len(restored[s]) == 0 {
			continue
		}
		l, r := lost[s][0], restored[s][0]
		switch {
		case r.ID != event.ConnectionRestoredID(s, l.At):
			t.Errorf("restore %s of %s does not end its loss %s", r.ID, s, l.ID)
		case r.partition != l.partition || r.offset < l.offset:
			t.Errorf("restore of %s at %d/%d, before its loss at %d/%d", s, r.partition, r.offset, l.partition, l.offset)
		case !r.At.After(l.At):
			t.Errorf("restore of %s timed %s, not after its loss at %s", s, r.At, l.At)
		}
	}
}

// checkHonestLoss fails t unless the loss came at least the timeout after the
// sensor's last reading before it.
func checkHonestLoss(t *testing.T, loss loggedEvent, readings []time.Time) {
	t.Helper()
	for _, at := range readings {
		if at.After(loss.At.Add(-stallTimeout)) && !at.After(loss.At) {
			t.Errorf("%s declared lost at %s, but it reported at %s, within the timeout before", loss.SensorID,
				loss.At.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
			return
		}
	}
}

func distinctIDs(events []loggedEvent) int {
	ids := map[string]bool{}
	for _, e := range events {
		ids[e.ID] = true
	}
	return len(ids)
}

// caughtUpTo reports whether group committed at least the given offsets of topic.
func (o offsets) caughtUpTo(group, topic string, want map[int32]int64) (bool, string) {
	o.t.Helper()
	got := o.committed(group, topic)
	for p, end := range want {
		if got[p] < end {
			return false, fmt.Sprintf("%s committed %v of %s, want %v", group, got, topic, want)
		}
	}
	return true, ""
}

// fleet produces a reading of every active sensor once per interval, in one
// produce call per round, and remembers each reading's broker timestamp.
type fleet struct {
	client *kgo.Client
	topic  string
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	active   map[string]bool
	readings map[string][]time.Time
	rounds   int
	err      error
}

func startFleet(t *testing.T, client *kgo.Client, topic string, interval time.Duration) *fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{client: client, topic: topic, cancel: cancel, done: make(chan struct{}),
		active: map[string]bool{}, readings: map[string][]time.Time{}}
	go func() {
		defer close(f.done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			if err := f.round(ctx); err != nil {
				f.mu.Lock()
				f.err = err
				f.mu.Unlock()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-f.done
	})
	return f
}

func (f *fleet) round(ctx context.Context) error {
	f.mu.Lock()
	var recs []*kgo.Record
	for id, on := range f.active {
		if on {
			recs = append(recs, &kgo.Record{Topic: f.topic, Key: []byte(id),
				Value: fmt.Appendf(nil, `{"sensor_id":%q,"data":1}`, id)})
		}
	}
	f.mu.Unlock()
	if len(recs) > 0 {
		if err := f.client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return fmt.Errorf("producing a round: %w", err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range recs {
		f.readings[string(r.Key)] = append(f.readings[string(r.Key)], r.Timestamp)
	}
	f.rounds++
	return nil
}

// set turns sensors on or off from the next round.
func (f *fleet) set(on bool, sensors ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range sensors {
		f.active[s] = on
	}
}

func (f *fleet) roundsDone() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rounds
}

// stop ends production and returns every reading's time by sensor.
func (f *fleet) stop(t *testing.T) map[string][]time.Time {
	t.Helper()
	f.cancel()
	<-f.done
	if f.err != nil {
		t.Fatal(f.err)
	}
	return f.readings
}

// loggedEvent is an event as found on lockstream.events, with its place there.
type loggedEvent struct {
	event.Event
	partition int32
	offset    int64
}

// eventLog reads lockstream.events from the start, in the background, for the
// whole test.
type eventLog struct {
	mu     sync.Mutex
	events []loggedEvent
	err    error
}

func startEventLog(t *testing.T, cfg stream.Config) *eventLog {
	t.Helper()
	client := streamtest.Client(t, cfg, kgo.ConsumeTopics(cfg.EventsTopic()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithCancel(context.Background())
	l := &eventLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fetches := client.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			var batch []loggedEvent
			var err error
			fetches.EachError(func(_ string, _ int32, ferr error) { err = errors.Join(err, ferr) })
			fetches.EachRecord(func(r *kgo.Record) {
				e, derr := event.Decode(r.Value)
				if derr != nil {
					err = errors.Join(err, fmt.Errorf("event at %d/%d: %w", r.Partition, r.Offset, derr))
					return
				}
				batch = append(batch, loggedEvent{Event: e, partition: r.Partition, offset: r.Offset})
			})
			l.mu.Lock()
			l.events = append(l.events, batch...)
			l.err = errors.Join(l.err, err)
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return l
}

// ofType returns the events of typ so far, by sensor, in topic order. It fails t
// if reading the topic failed.
func (l *eventLog) ofType(t *testing.T, typ event.Type) map[string][]loggedEvent {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		t.Fatalf("reading lockstream.events: %v", l.err)
	}
	out := map[string][]loggedEvent{}
	for _, e := range l.events {
		if e.Type == typ {
			out[e.SensorID] = append(out[e.SensorID], e)
		}
	}
	return out
}
