package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/reading"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// processWait bounds every wait of the process tests: generous, because they share
// two loaded cores with other engineers' tests, under -race.
const processWait = 120 * time.Second

// processBinary is the lockstream binary the process tests run, built once per test
// binary into a directory TestMain removes.
var processBinary struct {
	once sync.Once
	dir  string // set by TestMain
	path string
	err  error
}

// lockstreamBinary builds the binary on first use (without -race: only the test
// process needs it) and returns its path.
func lockstreamBinary(t testing.TB) string {
	t.Helper()
	processBinary.once.Do(func() {
		if processBinary.dir == "" {
			processBinary.err = errors.New("TestMain did not set the binary directory")
			return
		}
		path := filepath.Join(processBinary.dir, "lockstream")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", path, ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			processBinary.err = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		processBinary.path = path
	})
	if processBinary.err != nil {
		t.Fatalf("building lockstream: %v", processBinary.err)
	}
	return processBinary.path
}

// logBuffer collects a process's output; safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// harness runs lockstream subcommands as processes of one test, with one
// environment, and fails the test as soon as one of them exits unasked.
type harness struct {
	t   *testing.T
	bin string
	env []string

	mu    sync.Mutex
	procs []*proc
}

// newHarness returns a harness whose processes see the environment of the test
// process without any LOCKSTREAM_ variable, plus settings (NAME=value). Their
// shutdown delay is 0 (no load balancer waits on them) unless settings say
// otherwise: the last value of a variable wins.
func newHarness(t *testing.T, settings ...string) *harness {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCKSTREAM_") {
			env = append(env, kv)
		}
	}
	env = append(env, "LOCKSTREAM_SHUTDOWN_DELAY=0s")
	return &harness{t: t, bin: lockstreamBinary(t), env: append(env, settings...)}
}

// storeSettings returns the environment that points lockstream at the stores and the
// brokers.
func storeSettings(kafka stream.Config, pgURL, chURL, redisURL, redisPrefix string) []string {
	return []string{
		"LOCKSTREAM_KAFKA_BROKERS=" + strings.Join(kafka.Brokers, ","),
		"LOCKSTREAM_KAFKA_PARTITIONS=" + strconv.Itoa(kafka.Partitions),
		"LOCKSTREAM_PG_URL=" + pgURL,
		"LOCKSTREAM_CLICKHOUSE_URL=" + chURL,
		"LOCKSTREAM_REDIS_URL=" + redisURL,
		"LOCKSTREAM_REDIS_PREFIX=" + redisPrefix,
		"LOCKSTREAM_HTTP_ADDR=127.0.0.1:0",
		"LOCKSTREAM_LOG_LEVEL=info",
	}
}

// proc is one running lockstream process.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	out  *logBuffer
	done chan struct{} // closed once the process exited
	// stopping is set before the test stops the process, so its exit is expected.
	stopping atomic.Bool
}

// start runs `lockstream args...` as a process named name (for messages); it is
// killed, if still running, when the test ends.
func (h *harness) start(name string, args ...string) *proc {
	h.t.Helper()
	p := &proc{t: h.t, name: name, out: &logBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(h.bin, args...)
	p.cmd.Env = h.env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// Should the test binary die without its cleanups, the child goes with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		h.t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	h.t.Cleanup(func() {
		if p.running() {
			p.stopping.Store(true)
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
		if h.t.Failed() {
			h.t.Logf("output of %s (%s):\n%s", name, strings.Join(args, " "), tail(p.out.String(), 6000))
		}
	})
	h.mu.Lock()
	h.procs = append(h.procs, p)
	h.mu.Unlock()
	return p
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill ends the process with SIGKILL (a crash: no shutdown code runs) and waits
// until it is gone.
func (p *proc) kill() {
	p.t.Helper()
	p.stopping.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatalf("killing %s: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(processWait):
		p.t.Fatalf("%s still running %v after SIGKILL", p.name, processWait)
	}
}

// stop asks the process to stop with SIGTERM and fails the test unless it exits
// with status 0 (a clean stop) in time.
func (p *proc) stop() {
	p.t.Helper()
	p.signal(syscall.SIGTERM)
	if code := p.waitExit(); code != 0 {
		p.t.Fatalf("%s exited with status %d after SIGTERM, want 0:\n%s", p.name, code, tail(p.out.String(), 4000))
	}
}

// signal sends sig to the process, whose exit is then expected.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	p.stopping.Store(true)
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signalling %s (%v): %v", p.name, sig, err)
	}
}

// waitExit waits until the process has exited and returns its exit status.
func (p *proc) waitExit() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(processWait):
		p.t.Fatalf("%s still running %v after it was signalled", p.name, processWait)
	}
	return p.cmd.ProcessState.ExitCode()
}

// waitFor polls cond until it holds, failing the test after processWait or as
// soon as one of the harness's processes exits without being asked to. cond
// returns what it is still waiting for.
func (h *harness) waitFor(what string, cond func() (bool, string)) {
	h.t.Helper()
	deadline := time.Now().Add(processWait)
	for {
		h.mu.Lock()
		procs := slices.Clone(h.procs)
		h.mu.Unlock()
		for _, p := range procs {
			if !p.running() && !p.stopping.Load() {
				h.t.Fatalf("waiting for %s: %s exited unasked (status %d):\n%s",
					what, p.name, p.cmd.ProcessState.ExitCode(), tail(p.out.String(), 4000))
			}
		}
		ok, still := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("gave up after %v waiting for %s: %s", processWait, what, still)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}

// privateKafka starts a kfake cluster of the test's own and creates lockstream's
// topics on it under their DESIGN.md names (the binary has no topic prefix, so the
// cluster cannot be shared), 12 partitions each.
func privateKafka(t *testing.T) stream.Config {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	cfg := stream.Config{Brokers: c.ListenAddrs(), Partitions: 12}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stream.EnsureTopics(ctx, streamtest.Client(t, cfg), cfg); err != nil {
		t.Fatalf("creating topics: %v", err)
	}
	return cfg
}

// committed returns group's committed offset for each partition of topic that has
// one.
func committed(ctx context.Context, client *kgo.Client, group, topic string) (map[int32]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	resp, err := req.RequestWith(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("fetching offsets of %s: %w", group, err)
	}
	out := map[int32]int64{}
	if err := kerr.ErrorForCode(resp.ErrorCode); errors.Is(err, kerr.GroupIDNotFound) {
		return out, nil // nothing committed yet
	} else if err != nil {
		return nil, fmt.Errorf("fetching offsets of %s: %w", group, err)
	}
	for _, rt := range resp.Topics {
		if rt.Topic != topic {
			continue
		}
		for _, p := range rt.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("fetching offsets of %s on %s/%d: %w", group, topic, p.Partition, err)
			}
			if p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out, nil
}

// offsets reads what the test polls: a group's committed offsets or a topic's end
// offsets, failing the test on error.
type offsets struct {
	t      *testing.T
	client *kgo.Client
}

func (o offsets) committed(group, topic string) map[int32]int64 {
	o.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := committed(ctx, o.client, group, topic)
	if err != nil {
		o.t.Fatal(err)
	}
	return got
}

func (o offsets) ends(topic string) map[int32]int64 {
	o.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := streamtest.EndOffsets(ctx, o.client, topic)
	if err != nil {
		o.t.Fatalf("end offsets of %s: %v", topic, err)
	}
	return got
}

// caughtUp reports whether group committed every record of each topic.
func (o offsets) caughtUp(group string, topics ...string) (bool, string) {
	o.t.Helper()
	for _, topic := range topics {
		got := o.committed(group, topic)
		for p, end := range o.ends(topic) {
			if end > 0 && got[p] != end {
				return false, fmt.Sprintf("%s committed %v of %s, ends %v", group, got, topic, o.ends(topic))
			}
		}
	}
	return true, ""
}

func sum(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// evictMembers removes every member of group, as the coordinator does once a dead
// member's session times out. A SIGKILLed consumer never leaves its group; without
// this its successor would wait out the 45 s session timeout of the dead member
// before it gets any partition, and three crashes would take minutes.
func evictMembers(t *testing.T, client *kgo.Client, group string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	describe := kmsg.NewPtrDescribeGroupsRequest()
	describe.Groups = []string{group}
	dresp, err := describe.RequestWith(ctx, client)
	if err != nil {
		t.Fatalf("describing group %s: %v", group, err)
	}
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group = group
	for _, g := range dresp.Groups {
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			t.Fatalf("describing group %s: %v", group, err)
		}
		for _, m := range g.Members {
			lm := kmsg.NewLeaveGroupRequestMember()
			lm.MemberID = m.MemberID
			leave.Members = append(leave.Members, lm)
		}
	}
	if len(leave.Members) == 0 {
		return
	}
	lresp, err := leave.RequestWith(ctx, client)
	if err != nil {
		t.Fatalf("evicting the members of %s: %v", group, err)
	}
	if err := kerr.ErrorForCode(lresp.ErrorCode); err != nil {
		t.Fatalf("evicting the members of %s: %v", group, err)
	}
	for _, m := range lresp.Members {
		if err := kerr.ErrorForCode(m.ErrorCode); err != nil {
			t.Fatalf("evicting member %s of %s: %v", m.MemberID, group, err)
		}
	}
}

// record is one record the tests produce, with what should become of it.
type record struct {
	key, value []byte
	sensor     string
	data       int
	reason     string // "" for a valid reading, else the DLQ reason
}

// registerFleet registers the sensors lock00000… of a fleet of n.
func registerFleet(t *testing.T, pgURL string, n int) {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("lock%05d", i)
	}
	storagetest.CreateSensors(t, pgURL, ids...)
}

// fleetRounds builds rounds of readings of a fleet of sensors lock00000…: in each
// round every sensor reports once (first a random state, then a flip a third of the
// time, a repeat otherwise), and every badEvery-th record is a bad one of a kind
// that cycles through the DLQ reasons.
func fleetRounds(seed uint64, sensors, rounds, badEvery int) [][]record {
	rng := rand.New(rand.NewPCG(seed, seed))
	last := make([]int, sensors)
	out := make([][]record, rounds)
	bad := 0
	for r := range rounds {
		for n, i := range rng.Perm(sensors) {
			id := fmt.Sprintf("lock%05d", i)
			if n%badEvery == badEvery-1 {
				out[r] = append(out[r], badReading(bad, id))
				bad++
			}
			data := last[i]
			switch {
			case r == 0:
				data = rng.IntN(2)
			case rng.IntN(3) == 0:
				data = 1 - data
			}
			last[i] = data
			value := fmt.Sprintf(`{"sensor_id":%q,"data":%d}`, id, data)
			if n%2 == 0 {
				value = fmt.Sprintf(`{"sensor_id":%q,"data":%d,"ts":%d}`, id, data, 1795341600000+int64(r*sensors+n))
			}
			out[r] = append(out[r], record{key: []byte(id), value: []byte(value), sensor: id, data: data})
		}
	}
	return out
}

func badReading(k int, id string) record {
	in := record{key: []byte(id)}
	switch k % 8 {
	case 0:
		in.value, in.reason = []byte(`{"sensor_id":"`+id+`","data":1`), reading.ReasonNotJSON
	case 1:
		in.value, in.reason = fmt.Appendf(nil, `{"sensor_id":%q,"data":2}`, id), reading.ReasonBadData
	case 2:
		long := id + "0123456789abcdef"
		in.key, in.value, in.reason = []byte(long), fmt.Appendf(nil, `{"sensor_id":%q,"data":1}`, long), reading.ReasonBadSensorID
	case 3:
		in.value, in.reason = []byte(`{"sensor_id":"other","data":1}`), reading.ReasonKeyMismatch
	case 4:
		in.value, in.reason = fmt.Appendf(nil, `{"sensor_id":%q,"data":1,"battery":3}`, id), reading.ReasonUnknownField
	case 5:
		in.value, in.reason = fmt.Appendf(nil, `{"sensor_id":%q,"data":0,"ts":"noon"}`, id), reading.ReasonBadTS
	case 6:
		in.key, in.value, in.reason = nil, fmt.Appendf(nil, `{"sensor_id":%q,"data":0}`, id), reading.ReasonKeyMismatch
	case 7:
		in.value, in.reason = []byte(`not json at all`), reading.ReasonNotJSON
	}
	return in
}

// produced is a reading as the broker stored it.
type produced struct {
	record
	partition int32
	offset    int64
}

// pos is a record's place in its topic.
type pos struct {
	partition int32
	offset    int64
}

// producer produces rounds of readings in the background, one round per interval
// and never past the rounds the test allowed, so a test can be sure the stream is
// still flowing when it crashes or stops something.
type producer struct {
	allowed atomic.Int64
	rounds  int
	done    chan struct{}
	// out and err are written by the producing goroutine; read them after done.
	out []produced
	err error
}

// startProducer produces rounds to topic through client, one per interval: the
// first allowed of them, then more as allowFraction permits. It stops when the
// test ends.
func startProducer(t *testing.T, client *kgo.Client, topic string, rounds [][]record, interval time.Duration, allowed int) *producer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &producer{rounds: len(rounds), done: make(chan struct{})}
	p.allowed.Store(int64(allowed))
	go func() {
		defer close(p.done)
		p.err = p.run(ctx, client, topic, rounds, interval)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

func (p *producer) run(ctx context.Context, client *kgo.Client, topic string, rounds [][]record, interval time.Duration) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for r, round := range rounds {
		for int64(r) >= p.allowed.Load() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-ticker.C:
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
		recs := make([]*kgo.Record, len(round))
		for i, in := range round {
			recs[i] = &kgo.Record{Topic: topic, Key: in.key, Value: in.value}
		}
		// One sensor's records keep their order: same key, same partition, and
		// ProduceSync keeps the order within a partition. It fills in each
		// record's partition and offset.
		if err := client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("producing round %d: %w", r, err)
		}
		for i, rec := range recs {
			p.out = append(p.out, produced{record: round[i], partition: rec.Partition, offset: rec.Offset})
		}
	}
	return nil
}

// allowFraction lets the producer go up to fraction (0…1) of its rounds.
func (p *producer) allowFraction(fraction float64) {
	n := int64(fraction*float64(p.rounds) + 0.5)
	for {
		cur := p.allowed.Load()
		if n <= cur || p.allowed.CompareAndSwap(cur, n) {
			return
		}
	}
}

// wait lets the producer finish every round and returns what it produced.
func (p *producer) wait(t *testing.T) []produced {
	t.Helper()
	p.allowFraction(1)
	select {
	case <-p.done:
	case <-time.After(processWait):
		t.Fatalf("producer not done after %v", processWait)
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.out
}

// outcome is what lockstream must make of the produced readings.
type outcome struct {
	final   map[string]consumer.StateChange // per sensor, its last change
	changes map[string][]event.Event        // per sensor, in order
	byID    map[string]event.Event
	source  map[string]pos // event id → the reading that caused it
	valid   map[pos]produced
	bad     map[pos]produced
}

// expectOutcome derives the outcome of records; at gives each reading's broker
// timestamp, topicID is the readings topic's id. Every sensor is registered
// (registerFleet).
func expectOutcome(records []produced, at map[pos]time.Time, topicID [16]byte) outcome {
	o := outcome{final: map[string]consumer.StateChange{}, changes: map[string][]event.Event{},
		byID: map[string]event.Event{}, source: map[string]pos{}, valid: map[pos]produced{}, bad: map[pos]produced{}}
	for _, r := range records {
		where := pos{r.partition, r.offset}
		if r.reason != "" {
			o.bad[where] = r
			continue
		}
		o.valid[where] = r
		prev, known := o.final[r.sensor]
		if known && prev.Data == r.data {
			continue
		}
		data := r.data
		e := event.Event{ID: event.StateChangedID(r.sensor, topicID, r.partition, r.offset), Type: event.StateChanged,
			SensorID: r.sensor, Data: &data, At: at[where]}
		if known {
			previous := prev.Data
			e.Previous = &previous
		}
		o.changes[r.sensor] = append(o.changes[r.sensor], e)
		o.byID[e.ID] = e
		o.source[e.ID] = where
		o.final[r.sensor] = consumer.StateChange{SensorID: r.sensor, Data: r.data, ChangedAt: e.At,
			TopicID: topicID, Partition: r.partition, Offset: r.offset}
	}
	return o
}

// readingTimes reads the readings topic back for the broker's record timestamps.
func readingTimes(t *testing.T, cfg stream.Config) map[pos]time.Time {
	t.Helper()
	out := map[pos]time.Time{}
	for _, r := range streamtest.ReadAll(t, cfg, cfg.ReadingsTopic()) {
		out[pos{r.Partition, r.Offset}] = r.Timestamp
	}
	return out
}

// checkState fails t unless sensor_state holds exactly the expected final states:
// one row per sensor that had a valid reading, none for anything else.
func checkState(t *testing.T, pgURL string, want outcome) {
	t.Helper()
	states := storagetest.AllSensorStates(t, pgURL)
	wrong := 0
	for _, s := range states {
		w, ok := want.final[s.SensorID]
		switch {
		case !ok:
			t.Errorf("sensor_state has %+v for a sensor with no valid reading", s)
		case s.Data != w.Data || s.TopicID != w.TopicID || s.Partition != w.Partition || s.Offset != w.Offset || !s.ChangedAt.Equal(w.ChangedAt):
			t.Errorf("sensor_state of %s is %+v, want %+v", s.SensorID, s, w)
		default:
			continue
		}
		if wrong++; wrong >= 10 {
			t.FailNow()
		}
	}
	if len(states) != len(want.final) {
		t.Fatalf("sensor_state has %d rows, want %d", len(states), len(want.final))
	}
}

// eventRecord is an event as found on lockstream.events.
type eventRecord struct {
	event.Event
	at pos
}

// checkEvents fails t unless lockstream.events holds every expected change and
// nothing else (copies of an event, same id, are allowed: at-least-once), with the
// first copies of each sensor's events in the order of its changes. It returns the
// topic's records.
func checkEvents(t *testing.T, cfg stream.Config, want outcome) []eventRecord {
	t.Helper()
	var (
		all      []eventRecord
		first    = map[string][]event.Event{}
		seen     = map[string]bool{}
		problems int
	)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		if problems++; problems >= 10 {
			t.FailNow()
		}
	}
	for _, r := range streamtest.ReadAll(t, cfg, cfg.EventsTopic()) {
		e, err := event.Decode(r.Value)
		if err != nil {
			t.Fatalf("lockstream.events holds %q: %v", r.Value, err)
		}
		if flapJudgement(e.Type) {
			continue
		}
		all = append(all, eventRecord{Event: e, at: pos{r.Partition, r.Offset}})
		if string(r.Key) != e.SensorID {
			fail("event %s keyed %q, want its sensor %s", e.ID, r.Key, e.SensorID)
		}
		w, ok := want.byID[e.ID]
		switch {
		case !ok:
			fail("unexpected event on lockstream.events: %s", describeEvent(e))
		case !sameEvent(e, w):
			fail("event %s is %s, want %s", e.ID, describeEvent(e), describeEvent(w))
		case !seen[e.ID]:
			seen[e.ID] = true
			first[e.SensorID] = append(first[e.SensorID], e)
		}
	}
	if len(seen) != len(want.byID) {
		missing := 0
		for id, e := range want.byID {
			if !seen[id] {
				if missing++; missing <= 5 {
					t.Errorf("change missing from lockstream.events: %s", describeEvent(e))
				}
			}
		}
		t.Fatalf("lockstream.events holds %d of %d expected changes (%d records)", len(seen), len(want.byID), len(all))
	}
	for sensor, changes := range want.changes {
		got := first[sensor]
		for i := range changes {
			if got[i].ID != changes[i].ID {
				fail("events of %s out of order: #%d is %s, want %s", sensor, i, describeEvent(got[i]), describeEvent(changes[i]))
				break
			}
		}
	}
	return all
}

// flapJudgement reports whether t is an event of the flapping judgement
// (sensor_unstable, sensor_stable), which random fleets trigger: the checks of
// the changes themselves leave them out (TestProcessFlappingSensorHeldThenStable
// checks them).
func flapJudgement(t event.Type) bool {
	return t == event.SensorUnstable || t == event.SensorStable
}

func sameEvent(a, b event.Event) bool {
	return a.ID == b.ID && a.Type == b.Type && a.SensorID == b.SensorID &&
		eqInt(a.Data, b.Data) && eqInt(a.Previous, b.Previous) && a.At.Equal(b.At)
}

func eqInt(a, b *int) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func describeEvent(e event.Event) string {
	show := func(v *int) string {
		if v == nil {
			return "null"
		}
		return strconv.Itoa(*v)
	}
	return fmt.Sprintf("{%s %s %s data=%s previous=%s at=%s}", e.ID, e.Type, e.SensorID, show(e.Data), show(e.Previous),
		e.At.Format(time.RFC3339Nano))
}

func describeHistoryEvent(e storage.HistoryEvent) string {
	return describeEvent(event.Event{ID: e.ID, Type: event.Type(e.Type), SensorID: e.SensorID, Data: e.Data,
		Previous: e.Previous, At: e.At})
}

// checkDLQ fails t unless the DLQ holds every bad record, with its reason, and
// nothing else (copies allowed: a replayed batch rejects its bad records again).
func checkDLQ(t *testing.T, cfg stream.Config, want outcome) {
	t.Helper()
	seen := map[pos]bool{}
	for _, r := range streamtest.ReadAll(t, cfg, cfg.DLQTopic()) {
		var reason, source string
		for _, h := range r.Headers {
			switch h.Key {
			case reading.HeaderError:
				reason = string(h.Value)
			case reading.HeaderSource:
				source = string(h.Value)
			}
		}
		where, ok := parseSource(source, cfg.ReadingsTopic())
		if !ok {
			t.Fatalf("DLQ record with source header %q", source)
		}
		w, ok := want.bad[where]
		switch {
		case !ok:
			t.Fatalf("DLQ holds %s (%s), which is not a bad record", source, reason)
		case w.reason != reason || !bytes.Equal(w.value, r.Value):
			t.Fatalf("DLQ record of %s: reason %q value %q, want %q %q", source, reason, r.Value, w.reason, w.value)
		}
		seen[where] = true
	}
	if len(seen) != len(want.bad) {
		t.Fatalf("DLQ holds %d of the %d bad records", len(seen), len(want.bad))
	}
}

var sourceRE = regexp.MustCompile(`^(.+)/(\d+)/(\d+)$`)

func parseSource(source, topic string) (pos, bool) {
	m := sourceRE.FindStringSubmatch(source)
	if m == nil || m[1] != topic {
		return pos{}, false
	}
	p, err1 := strconv.ParseInt(m[2], 10, 32)
	o, err2 := strconv.ParseInt(m[3], 10, 64)
	if err1 != nil || err2 != nil {
		return pos{}, false
	}
	return pos{int32(p), o}, true
}

// checkHistory fails t unless ClickHouse holds every valid reading and every
// expected change exactly once after deduplication (SELECT … FINAL), and nothing
// else.
func checkHistory(t *testing.T, chURL string, want outcome) {
	t.Helper()
	events := storagetest.AllEvents(t, chURL)
	count := map[string]int{}
	for _, e := range events {
		if flapJudgement(event.Type(e.Type)) {
			continue
		}
		count[e.ID]++
		w, ok := want.byID[e.ID]
		switch {
		case !ok:
			t.Fatalf("ClickHouse events holds unexpected %s", describeHistoryEvent(e))
		case count[e.ID] > 1:
			t.Fatalf("ClickHouse events holds event %s %d times after FINAL", e.ID, count[e.ID])
		case e.Type != string(w.Type) || e.SensorID != w.SensorID || !eqInt(e.Data, w.Data) ||
			!eqInt(e.Previous, w.Previous) || !e.At.Equal(w.At.Truncate(time.Second)):
			t.Fatalf("ClickHouse event %s, want %s", describeHistoryEvent(e), describeEvent(w))
		}
	}
	// count() and uniqExact(id) of events FINAL, and the expected change count.
	events = slices.DeleteFunc(events, func(e storage.HistoryEvent) bool { return flapJudgement(event.Type(e.Type)) })
	if len(events) != len(count) || len(count) != len(want.byID) {
		t.Fatalf("ClickHouse events FINAL: count() %d, uniqExact(id) %d, want %d changes", len(events), len(count), len(want.byID))
	}

	readings := storagetest.AllReadings(t, chURL)
	seen := map[pos]bool{}
	for _, r := range readings {
		where := pos{r.Partition, r.Offset}
		w, ok := want.valid[where]
		switch {
		case !ok:
			t.Fatalf("ClickHouse readings holds %+v, which is not a valid reading", r)
		case seen[where]:
			t.Fatalf("ClickHouse readings holds %d/%d twice after FINAL", r.Partition, r.Offset)
		case r.SensorID != w.sensor || r.Data != w.data:
			t.Fatalf("ClickHouse reading at %d/%d is %s=%d, want %s=%d", r.Partition, r.Offset, r.SensorID, r.Data, w.sensor, w.data)
		}
		seen[where] = true
	}
	if len(seen) != len(want.valid) {
		t.Fatalf("ClickHouse readings holds %d of %d valid readings", len(seen), len(want.valid))
	}
}

// countLines returns how many lines of a process's output contain substr.
func countLines(out, substr string) int {
	n := 0
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

var partitionsRE = regexp.MustCompile(`partitions="?\[([0-9 ]*)\]`)

// assignedPartitions returns the partitions of the last "partitions assigned" line
// of a consumer's output.
func assignedPartitions(out string) []int32 {
	var last string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, `msg="partitions assigned"`) {
			last = line
		}
	}
	m := partitionsRE.FindStringSubmatch(last)
	if m == nil {
		return nil
	}
	var ps []int32
	for f := range strings.FieldsSeq(m[1]) {
		p, err := strconv.ParseInt(f, 10, 32)
		if err == nil {
			ps = append(ps, int32(p))
		}
	}
	return ps
}
