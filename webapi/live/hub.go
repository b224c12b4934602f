// Package live feeds members' live streams, for the API's stream handler: its hub
// hears of new inbox messages on Postgres and queues each stream what follows its
// position, in seq order, with no gap and no duplicate. It has no daemon of
// its own: the API's server runs it (webapi.Server.RunStreams).
package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/inbox"
	lsmetrics "github.com/lockstream/lockstream/internal/metrics"
)

// Hub feeds the streams connected to this process. It listens on Postgres
// (inbox.Channel: NOTIFY sent by every inbox write in its transaction,
// so heard only once committed, whichever process wrote). A new message that
// comes whole in the notification and follows a stream's position right away
// is queued in the stream's bounded buffer at once (direct delivery, no read).
// Anything else — replay on connect, a pointer, a gap — marks the stream, and
// the fetch loop reads what each marked stream is missing ("stored after its
// position, in seq order"), in one query per batch of streams.
//
// A stream whose handler gave a Writer, and that has nothing queued or being
// written, is not even queued: the hub writes such a message to its connection
// itself, at once and without blocking (Writer), so a notification for
// thousands of idle streams wakes none of their goroutines; what a connection
// cannot take at once its stream's own writer finishes.
//
// Every path hands on only the seq right after the stream's position, so a stream
// gets no gap and no duplicate whatever the timing of notifications and reads,
// and a missed notification (the listening connection broke) costs only a
// re-read of every stream. The hub never blocks on a stream: it reads for a stream only
// what fits in its buffer; a stream whose buffer is full waits (stalled) until
// its writer drains it, and a writer that cannot write within the write timeout
// is cut off (the client resumes by replay). Memory is bounded by streams ×
// buffer.
type Hub struct {
	store   Store
	cfg     HubConfig
	logger  *slog.Logger
	metrics *HubMetrics

	mu      sync.Mutex
	streams map[string]map[*Subscriber]struct{} // by member id
	dirty   map[*Subscriber]struct{}
	stopped bool
	wake    chan struct{}
	running atomic.Bool
	// writes takes runs of writes at once to the hub's writer goroutines
	// (GOMAXPROCS of them, while Run runs).
	writes chan []immediate
}

// Subscriber is one connected stream.
type Subscriber struct {
	member string
	// out is the stream's buffer; only the hub's fetch loop sends on it. It holds
	// pointers: a buffer of values would cost its whole capacity of messages per
	// stream, even idle.
	out chan *inbox.Message
	// gone is closed when the hub drops the stream (shutdown).
	gone     chan struct{}
	goneOnce sync.Once
	// stalled is set when the hub found the buffer full; the writer asks for
	// more once it drained some.
	stalled atomic.Bool
	// replayUpTo is the newest seq when the stream connected: messages up to it
	// are replayed, later ones direct.
	replayUpTo int64

	// write, when set, writes a message to the stream's connection at once; the
	// hub calls it holding wmu, outside its own lock.
	write Writer
	// wmu is held by whoever writes to the stream's connection: its writer
	// (Lock) or the hub writing a message at once.
	wmu sync.Mutex
	// unwritten counts the messages queued in out that the stream's writer has
	// not written yet (Wrote): the hub writes at once only when there are none.
	unwritten atomic.Int64

	// Guarded by hub.mu.
	pos int64  // the seq of the last message queued or written
	gen uint64 // moves on with every notice, so a read that raced one is redone
}

// Writer writes m to a stream's connection at once, without blocking: the hub
// calls it (with the stream's write lock held, see Subscriber.Lock) for a new
// message that follows everything the stream was given, when nothing queued is
// left unwritten. What the connection does not take at once the Writer keeps
// and has the stream's own writer send first, under the same lock; m counts as
// the stream's either way. It may be called from several goroutines at once,
// for different streams.
type Writer func(sub *Subscriber, m *inbox.Message)

// immediate is a message the hub writes to a stream at once; it holds the
// stream's write lock.
type immediate struct {
	sub *Subscriber
	m   *inbox.Message
}

// writeRunLen is the most writes at once handed to a writer goroutine in one
// run: short runs share the work out evenly whichever writer the OS lets run.
const writeRunLen = 16

// NewHub returns a hub reading from store; Run starts it.
func NewHub(store Store, cfg HubConfig, metrics *HubMetrics, logger *slog.Logger) *Hub {
	return &Hub{
		store: store, cfg: cfg, logger: logger, metrics: metrics,
		streams: map[string]map[*Subscriber]struct{}{},
		dirty:   map[*Subscriber]struct{}{},
		wake:    make(chan struct{}, 1),
		writes:  make(chan []immediate, 1024),
	}
}

// Subscribe registers a stream of member positioned after seq pos; the hub
// replays what follows at once. With write, the hub writes new messages to the
// stream's connection itself when the stream has nothing else pending (see
// Writer); nil queues them all.
func (h *Hub) Subscribe(member string, pos, replayUpTo int64, write Writer) *Subscriber {
	sub := &Subscriber{member: member, out: make(chan *inbox.Message, h.cfg.Buffer),
		gone: make(chan struct{}), replayUpTo: replayUpTo, pos: pos, write: write}
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		sub.drop()
		return sub
	}
	if h.streams[member] == nil {
		h.streams[member] = map[*Subscriber]struct{}{}
	}
	h.streams[member][sub] = struct{}{}
	h.dirty[sub] = struct{}{}
	h.mu.Unlock()
	h.metrics.connected.Inc()
	h.signal()
	return sub
}

// Unsubscribe forgets a stream whose handler returned.
func (h *Hub) Unsubscribe(sub *Subscriber) {
	h.mu.Lock()
	if set := h.streams[sub.member]; set != nil {
		if _, ok := set[sub]; ok {
			delete(set, sub)
			if len(set) == 0 {
				delete(h.streams, sub.member)
			}
			h.metrics.connected.Dec()
		}
	}
	delete(h.dirty, sub)
	h.mu.Unlock()
}

// Messages is the stream's buffer: what the hub queued, in seq order.
func (sub *Subscriber) Messages() <-chan *inbox.Message { return sub.out }

// Gone is closed when the hub drops the stream (it stopped).
func (sub *Subscriber) Gone() <-chan struct{} { return sub.gone }

// Replayed reports whether m was stored before the stream connected.
func (sub *Subscriber) Replayed(m *inbox.Message) bool { return m.Seq <= sub.replayUpTo }

// Lock takes the stream's write lock: its writer holds it while it writes to
// the connection, which the hub's writes at once (Writer) then leave alone.
func (sub *Subscriber) Lock() { sub.wmu.Lock() }

// Unlock releases the stream's write lock.
func (sub *Subscriber) Unlock() { sub.wmu.Unlock() }

// Wrote tells the hub that the stream's writer wrote n of the messages it took
// from Messages.
func (sub *Subscriber) Wrote(n int) { sub.unwritten.Add(-int64(n)) }

// Running reports whether Run is feeding the streams.
func (h *Hub) Running() bool { return h.running.Load() }

func (sub *Subscriber) drop() {
	sub.goneOnce.Do(func() { close(sub.gone) })
}

func (h *Hub) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Drained is called by a writer that emptied part of a stalled buffer.
func (h *Hub) Drained(sub *Subscriber) {
	if !sub.stalled.CompareAndSwap(true, false) {
		return
	}
	h.mu.Lock()
	if _, ok := h.streams[sub.member][sub]; ok {
		h.dirty[sub] = struct{}{}
	}
	h.mu.Unlock()
	h.signal()
}

// notice serves news from Postgres. A message that follows a stream's position
// right away is written at once or queued (direct delivery, no read); a
// pointer, or a message after a gap (the stream is still replaying, or missed
// something) or for a full buffer, marks the stream for the fetch loop to read.
// The writes at once are made by the hub's writer goroutines, in runs, after
// the hub's lock is released, each holding its stream's write lock (taken under
// the hub's: a message queued meanwhile, by this or a later notice or a read,
// waits for it).
func (h *Hub) notice(news inbox.News) {
	marked := false
	var now []immediate
	h.mu.Lock()
	for i := range news.Messages {
		m := &news.Messages[i]
		for sub := range h.streams[m.MemberID] {
			switch {
			case m.Seq <= sub.pos:
			case m.Seq == sub.pos+1 && sub.write != nil && sub.unwritten.Load() == 0 && sub.wmu.TryLock():
				sub.pos = m.Seq
				now = append(now, immediate{sub: sub, m: m})
			case m.Seq == sub.pos+1 && h.queue(sub, m):
			default:
				sub.gen++
				h.dirty[sub] = struct{}{}
				marked = true
			}
		}
	}
	for _, n := range news.Pointers {
		for sub := range h.streams[n.MemberID] {
			if n.Seq > sub.pos {
				sub.gen++
				h.dirty[sub] = struct{}{}
				marked = true
			}
		}
	}
	h.mu.Unlock()
	for len(now) > 0 {
		n := min(len(now), writeRunLen)
		h.writes <- now[:n]
		now = now[n:]
	}
	if marked {
		h.signal()
	}
}

// writeRun makes a run of writes at once, in order, releasing each stream's
// write lock.
func writeRun(now []immediate) {
	for _, w := range now {
		w.sub.write(w.sub, w.m)
		w.sub.wmu.Unlock()
	}
}

// queue puts m in sub's buffer unless it is full; h.mu is held.
func (h *Hub) queue(sub *Subscriber, m *inbox.Message) bool {
	sub.unwritten.Add(1)
	select {
	case sub.out <- m:
		sub.pos = m.Seq
		return true
	default:
		sub.unwritten.Add(-1)
		sub.stalled.Store(true)
		h.metrics.stalls.Inc()
		return false
	}
}

// resync marks every stream: notifications may have been missed.
func (h *Hub) resync() {
	h.mu.Lock()
	for _, set := range h.streams {
		for sub := range set {
			sub.gen++
			h.dirty[sub] = struct{}{}
		}
	}
	h.mu.Unlock()
	h.signal()
}

// Run listens and fetches until ctx ends, then drops every stream so their
// handlers return (the HTTP server's shutdown waits for them).
func (h *Hub) Run(ctx context.Context) error {
	if !h.running.CompareAndSwap(false, true) {
		return errors.New("inbox: the hub is already running")
	}
	var wg, writers sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		writers.Go(func() {
			for run := range h.writes {
				writeRun(run)
			}
		})
	}
	wg.Go(func() {
		h.listen(ctx)
		close(h.writes) // only listen hands writes out
		writers.Wait()
	})
	h.fetchLoop(ctx)
	wg.Wait()

	h.mu.Lock()
	h.stopped = true
	for _, set := range h.streams {
		for sub := range set {
			sub.drop()
		}
	}
	h.mu.Unlock()
	return nil
}

// listen keeps a LISTEN open, re-reading every stream after each (re)connection.
func (h *Hub) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := h.store.ListenInbox(ctx, func() {
			h.metrics.listening.Set(1)
			h.resync()
		}, h.notice)
		h.metrics.listening.Set(0)
		if ctx.Err() != nil {
			return
		}
		h.logger.WarnContext(ctx, "listening for inbox messages failed; listening again", "err", err,
			"in", h.cfg.ListenRetry)
		select {
		case <-ctx.Done():
		case <-time.After(h.cfg.ListenRetry):
		}
	}
}

// fetchJob is one stream's part of a fetch.
type fetchJob struct {
	sub   *Subscriber
	gen   uint64
	limit int
}

// fetchLoop serves the marked streams, a batch at a time, until ctx ends.
func (h *Hub) fetchLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.wake:
		}
		for ctx.Err() == nil {
			jobs, cursors := h.takeDirty()
			if len(jobs) == 0 {
				break
			}
			start := time.Now()
			fctx, cancel := context.WithTimeout(ctx, h.cfg.WriteTimeout)
			messages, err := h.store.InboxAfter(fctx, cursors)
			cancel()
			h.metrics.fetchDuration.Observe(time.Since(start).Seconds())
			if err != nil {
				h.requeue(jobs)
				if ctx.Err() != nil {
					return
				}
				h.metrics.fetchErrors.Inc()
				h.logger.ErrorContext(ctx, "reading inbox messages for streams failed; retrying",
					"streams", len(jobs), "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(h.cfg.ListenRetry):
				}
				continue
			}
			h.deliver(jobs, messages)
		}
	}
}

// takeDirty takes up to FetchBatch marked streams that have room in their
// buffer; a full one is left stalled until its writer drains it.
func (h *Hub) takeDirty() ([]fetchJob, []inbox.Cursor) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var (
		jobs    []fetchJob
		cursors []inbox.Cursor
	)
	for sub := range h.dirty {
		if len(jobs) == h.cfg.FetchBatch {
			break
		}
		delete(h.dirty, sub)
		free := cap(sub.out) - len(sub.out)
		if free == 0 {
			sub.stalled.Store(true)
			h.metrics.stalls.Inc()
			continue
		}
		jobs = append(jobs, fetchJob{sub: sub, gen: sub.gen, limit: free})
		cursors = append(cursors, inbox.Cursor{MemberID: sub.member, After: sub.pos, Limit: free})
	}
	return jobs, cursors
}

// requeue marks again the streams of a failed fetch.
func (h *Hub) requeue(jobs []fetchJob) {
	h.mu.Lock()
	for _, j := range jobs {
		if _, ok := h.streams[j.sub.member][j.sub]; ok {
			h.dirty[j.sub] = struct{}{}
		}
	}
	h.mu.Unlock()
}

// deliver queues what a fetch read. A stream that got a full buffer's worth may
// have more and stays marked, as does one noticed again while it was read.
func (h *Hub) deliver(jobs []fetchJob, messages [][]inbox.Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, j := range jobs {
		if _, ok := h.streams[j.sub.member][j.sub]; !ok {
			continue // gone meanwhile
		}
		full := false
		for k := range messages[i] {
			m := &messages[i][k]
			if m.Seq <= j.sub.pos {
				continue // queued directly meanwhile
			}
			if !h.queue(j.sub, m) {
				// Direct deliveries took the room this read counted on; what is
				// left is read again once the writer drained some.
				full = true
				break
			}
		}
		if !full && (len(messages[i]) == j.limit || j.sub.gen != j.gen) {
			h.dirty[j.sub] = struct{}{}
		}
	}
	if len(h.dirty) > 0 {
		h.signal()
	}
}

// Store is what the hub reads: the inbox's notifications and its messages
// after each stream's position (PostgresStore).
type Store interface {
	ListenInbox(ctx context.Context, onListen func(), onNews func(inbox.News)) error
	InboxAfter(ctx context.Context, cursors []inbox.Cursor) ([][]inbox.Message, error)
}

// HubConfig bounds the hub; every field must be positive (the caller applies
// its defaults).
type HubConfig struct {
	// Buffer is how many messages may wait for one stream's writer; the hub
	// reads no more for a stream whose buffer is full.
	Buffer int
	// FetchBatch is how many streams one read of the inbox serves.
	FetchBatch int
	// WriteTimeout bounds one read of the inbox for a batch of streams.
	WriteTimeout time.Duration
	// ListenRetry is the pause before listening, or reading, again after a failure.
	ListenRetry time.Duration
}

// HubMetrics are the hub's Prometheus collectors.
type HubMetrics struct {
	connected     prometheus.Gauge
	listening     prometheus.Gauge
	stalls        prometheus.Counter
	fetchErrors   prometheus.Counter
	fetchDuration prometheus.Histogram
}

// NewHubMetrics registers the hub's collectors in reg.
func NewHubMetrics(reg prometheus.Registerer) (*HubMetrics, error) {
	m := &HubMetrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lockstream_stream_connections", Help: "Live streams (GET /v1/stream) connected to this process."}),
		listening: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lockstream_stream_listening", Help: "1 while this process listens for new inbox messages on Postgres."}),
		stalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_stream_stalls_total", Help: "Times a stream's buffer was found full: its reader is slower than its messages."}),
		fetchErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_stream_fetch_errors_total", Help: "Failed reads of inbox messages for streams (retried)."}),
		fetchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lockstream_stream_fetch_duration_seconds", Help: "Time of one read of inbox messages for a batch of streams.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9)}),
	}
	if err := lsmetrics.RegisterAll(reg, m.connected, m.listening, m.stalls, m.fetchErrors, m.fetchDuration); err != nil {
		return nil, fmt.Errorf("live stream hub: %w", err)
	}
	return m, nil
}
