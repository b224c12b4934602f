package stream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Defaults of GroupConfig.
const (
	DefaultMaxPollRecords = 10_000
	DefaultQueueBatches   = 2
	DefaultDrainTimeout   = 30 * time.Second
)

// GroupConfig configures a Group.
type GroupConfig struct {
	// Stream says where Kafka is. Brokers is required.
	Stream Config
	// Group is the consumer group. Required.
	Group string
	// Topics are the topics consumed. Required.
	Topics []string
	// MaxPollRecords bounds the records one poll takes, over all partitions.
	// Rebalances wait for a poll round to be handed out (BlockRebalanceOnPoll),
	// so a round must stay short. Defaults to DefaultMaxPollRecords (10,000).
	MaxPollRecords int
	// QueueBatches is how many polled batches wait for a partition's worker
	// while it works on one. When they are all taken, polling waits: memory stays
	// bounded while a store is slow. Defaults to DefaultQueueBatches (2).
	QueueBatches int
	// DrainTimeout bounds how long a stopping worker (its partition revoked, or
	// the Group stopping) waits for the effects of its batches in flight before
	// it gives up on them; what it gives up is not committed and is consumed
	// again. Defaults to DefaultDrainTimeout (30 s).
	DrainTimeout time.Duration
	// ClientName labels this Group's Kafka client metrics (client="…").
	// Defaults to Group.
	ClientName string
	// Opts are more client options, appended last (producer settings of a
	// handler that produces through the Group's client, test hooks).
	Opts []kgo.Opt
}

// WithDefaults returns the config with every unset field set to its default.
func (c GroupConfig) WithDefaults() GroupConfig {
	c.Stream = c.Stream.WithDefaults()
	c.MaxPollRecords = cmp.Or(c.MaxPollRecords, DefaultMaxPollRecords)
	c.QueueBatches = cmp.Or(c.QueueBatches, DefaultQueueBatches)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	c.ClientName = cmp.Or(c.ClientName, c.Group)
	return c
}

// Validate reports every field that cannot work.
func (c GroupConfig) Validate() error {
	var errs []error
	if err := c.Stream.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("group config: Stream: %w", err))
	}
	if c.Group == "" {
		errs = append(errs, errors.New("group config: Group is empty"))
	}
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("group config: Topics is empty"))
	}
	if c.MaxPollRecords < 1 {
		errs = append(errs, fmt.Errorf("group config: MaxPollRecords: %d, want at least 1", c.MaxPollRecords))
	}
	if c.QueueBatches < 1 {
		errs = append(errs, fmt.Errorf("group config: QueueBatches: %d, want at least 1", c.QueueBatches))
	}
	if c.DrainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("group config: DrainTimeout: %v, want more than 0", c.DrainTimeout))
	}
	return errors.Join(errs...)
}

// Batch is one poll's records of one partition, in offset order.
type Batch struct {
	Topic string
	// TopicID is the broker's id of the topic (zero when the broker sends
	// none): a topic deleted and created again under the same name has a new
	// one, and its offsets start again.
	TopicID   [16]byte
	Partition int32
	Records   []*kgo.Record
	// HighWatermark is the partition's end offset when the batch was fetched.
	HighWatermark int64
}

// Pending reports when a batch's effects are durable: it is closed then. A nil
// Pending means they already are.
type Pending <-chan struct{}

// PartitionHandler applies the batches of one assigned partition.
type PartitionHandler interface {
	// Handle applies b. It is called from one goroutine per partition, with the
	// partition's batches in order. It returns once the batch's effects are
	// durable (nil Pending), or with a Pending for effects that become durable
	// later (a writer that stores several partitions' records at once); the
	// batch is marked for commit only then, and in order. ctx is cancelled when
	// the partition is revoked or lost or the Group stops: Handle should then
	// stop retrying and return an error, and nothing of the batch is committed.
	Handle(ctx context.Context, b Batch) (Pending, error)
	// Close is called once after the last Handle, when the partition goes.
	Close()
}

// Handler makes the handlers of the partitions a Group is assigned.
type Handler interface {
	// Assigned returns the handler of a newly assigned partition. client is the
	// Group's client, for handlers that produce.
	Assigned(client *kgo.Client, topic string, partition int32) PartitionHandler
}

// CommitInterval is how often a Group commits what its workers marked (also
// on revoke and at shutdown): a batch's offsets may reach the broker up to this
// long after its effects were made durable.
const CommitInterval = 5 * time.Second

// Group is the one Kafka consume loop of lockstream, in franz-go's
// goroutine-per-partition shape: a worker per assigned partition applies its
// batches in order while the others work in parallel; a batch is marked for
// commit only after its effects are durable, and marks are committed every few
// seconds, when partitions are revoked and at shutdown; partitions lost (this
// member was kicked out) commit nothing, since another member may own them
// already.
//
// The trap (see kgo.BlockRebalanceOnPoll): polls and rebalances exclude each
// other, so a worker never receives a batch of a partition being revoked, but a
// member whose workers stay busy longer than the group's rebalance timeout (a
// store down during a rebalance) is kicked out of the group; its partitions are
// then lost and their uncommitted batches consumed again by their next owner.
type Group struct {
	cfg     GroupConfig
	handler Handler
	logger  *slog.Logger
	reg     prometheus.Registerer
	started atomic.Bool

	// stop ends the poll loop with a cause: Run's context ending, or a
	// worker's failure (fail).
	stop context.CancelCauseFunc

	mu      sync.Mutex
	workers map[topicPartition]*worker
}

// errFailed marks a Group stopped by a worker's failure rather than by Run's
// context.
var errFailed = errors.New("group failed")

// fail stops the Group because a partition cannot go on.
func (g *Group) fail(err error) {
	g.stop(fmt.Errorf("%w: %w", errFailed, err))
}

type topicPartition struct {
	topic     string
	partition int32
}

// NewGroup returns a Group; Run starts it. Its Kafka client's metrics go to
// reg; a nil logger logs nothing.
func NewGroup(cfg GroupConfig, handler Handler, reg prometheus.Registerer, logger *slog.Logger) (*Group, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if handler == nil {
		return nil, errors.New("group: nil Handler")
	}
	if reg == nil {
		return nil, errors.New("group: nil Registerer")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Group{cfg: cfg, handler: handler, logger: logger, reg: reg, workers: map[topicPartition]*worker{}}, nil
}

// Run consumes until ctx is cancelled, then stops the workers (each finishes
// its batch in progress and waits up to DrainTimeout for the effects in
// flight), commits what they marked, leaves the group and returns nil. It
// returns an error when Kafka cannot be reached at start. Run may be called
// once.
func (g *Group) Run(ctx context.Context) error {
	if !g.started.CompareAndSwap(false, true) {
		return errors.New("group: Run called twice")
	}
	client, err := kgo.NewClient(g.clientOpts()...)
	if err != nil {
		return fmt.Errorf("group %s: creating kafka client: %w", g.cfg.Group, err)
	}
	if err := client.Ping(ctx); err != nil {
		client.Close()
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("group %s: reaching kafka: %w", g.cfg.Group, err)
	}
	g.logger.Info("consuming", "group", g.cfg.Group, "topics", g.cfg.Topics)
	pollCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	g.stop = stop
	g.poll(pollCtx, client)

	client.AllowRebalance()
	g.stopWorkers(nil, true)
	commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.DrainTimeout)
	defer cancel()
	if err := client.CommitMarkedOffsets(commitCtx); err != nil {
		// Not fatal: the uncommitted batches are consumed again.
		g.logger.Warn("final commit failed", "group", g.cfg.Group, "err", err)
	}
	client.Close()
	if cause := context.Cause(pollCtx); errors.Is(cause, errFailed) {
		return fmt.Errorf("group %s: %w", g.cfg.Group, cause)
	}
	g.logger.Info("stopped consuming", "group", g.cfg.Group)
	return nil
}

func (g *Group) clientOpts() []kgo.Opt {
	opts := append(ClientOpts(g.cfg.Stream),
		WithLogger(g.logger),
		ClientMetrics(g.reg, g.cfg.ClientName),
		kgo.ConsumerGroup(g.cfg.Group),
		kgo.ConsumeTopics(g.cfg.Topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(g.assigned),
		kgo.OnPartitionsRevoked(g.revoked),
		kgo.OnPartitionsLost(g.lost),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(CommitInterval),
		kgo.BlockRebalanceOnPoll(),
	)
	return append(opts, g.cfg.Opts...)
}

// poll hands polled batches to their partitions' workers until ctx ends.
func (g *Group) poll(ctx context.Context, client *kgo.Client) {
	for {
		fetches := client.PollRecords(ctx, g.cfg.MaxPollRecords)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			g.logger.Error("fetching", "topic", topic, "partition", partition, "err", err)
		})
		fetches.EachTopic(func(t kgo.FetchTopic) {
			for _, p := range t.Partitions {
				if len(p.Records) == 0 {
					continue
				}
				w := g.worker(topicPartition{t.Topic, p.Partition})
				if w == nil {
					// Cannot happen with BlockRebalanceOnPoll: assignment
					// precedes fetching, and revoke waits for this round.
					g.logger.Error("records for a partition without a worker", "topic", t.Topic, "partition", p.Partition)
					continue
				}
				b := Batch{Topic: t.Topic, TopicID: t.TopicID, Partition: p.Partition,
					Records: p.Records, HighWatermark: p.HighWatermark}
				// A busy worker fills its queue and this send waits: intake
				// stops instead of memory growing.
				select {
				case w.batches <- b:
				case <-ctx.Done():
					return
				}
			}
		})
		client.AllowRebalance()
	}
}

func (g *Group) worker(tp topicPartition) *worker {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.workers[tp]
}

func (g *Group) assigned(_ context.Context, client *kgo.Client, assigned map[string][]int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for topic, partitions := range assigned {
		for _, p := range partitions {
			ctx, cancel := context.WithCancel(context.Background())
			w := &worker{
				g: g, client: client, topic: topic, partition: p,
				handler: g.handler.Assigned(client, topic, p),
				batches: make(chan Batch, g.cfg.QueueBatches),
				ctx:     ctx, cancel: cancel,
				quit: make(chan struct{}), done: make(chan struct{}),
			}
			g.workers[topicPartition{topic, p}] = w
			go w.run()
		}
		g.logger.Info("partitions assigned", "group", g.cfg.Group, "topic", topic, "partitions", partitions)
	}
}

func (g *Group) revoked(ctx context.Context, client *kgo.Client, revoked map[string][]int32) {
	g.logger.Info("partitions revoked", "group", g.cfg.Group, "partitions", revoked)
	g.stopWorkers(revoked, false)
	if err := client.CommitMarkedOffsets(ctx); err != nil && !errors.Is(err, context.Canceled) {
		g.logger.Warn("commit on revoke failed", "group", g.cfg.Group, "err", err)
	}
}

func (g *Group) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	g.logger.Warn("partitions lost", "group", g.cfg.Group, "partitions", lost)
	// Another member may own these partitions already: committing could rewind
	// its progress, so the marks are dropped and the new owner replays them.
	g.stopWorkers(lost, false)
}

// stopWorkers stops the workers of partitions (every worker when all is set)
// and waits for them.
func (g *Group) stopWorkers(partitions map[string][]int32, all bool) {
	g.mu.Lock()
	var stopping []*worker
	for tp, w := range g.workers {
		if all || containsPartition(partitions[tp.topic], tp.partition) {
			stopping = append(stopping, w)
			delete(g.workers, tp)
		}
	}
	g.mu.Unlock()
	for _, w := range stopping {
		close(w.quit)
		w.cancel()
	}
	for _, w := range stopping {
		<-w.done
	}
}

func containsPartition(ps []int32, p int32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// worker applies one partition's batches in order and marks them once durable.
type worker struct {
	g          *Group
	client     *kgo.Client
	topic      string
	partition  int32
	handler    PartitionHandler
	batches    chan Batch
	ctx        context.Context // cancelled when the worker must stop
	cancel     context.CancelFunc
	quit, done chan struct{}
	inFlight   []inFlight // batches handled, effects not yet durable, in order
}

// inFlight is a handled batch waiting for its effects.
type inFlight struct {
	pending Pending
	last    *kgo.Record
}

func (w *worker) run() {
	defer close(w.done)
	defer w.handler.Close()
	for {
		var head Pending
		if len(w.inFlight) > 0 {
			head = w.inFlight[0].pending
		}
		select {
		case <-w.quit:
			w.drain()
			return
		case <-head:
			w.markDone()
		case b := <-w.batches:
			select {
			case <-w.quit:
				w.drain()
				return // not started: the partition's next owner consumes it
			default:
			}
			pending, err := w.handler.Handle(w.ctx, b)
			if err != nil {
				if w.ctx.Err() == nil {
					// Handle gives up only when told to stop; anything else is
					// a bug, and skipping the batch would lose it.
					w.g.fail(fmt.Errorf("partition %s/%d: batch at offset %d: %w",
						w.topic, w.partition, b.Records[0].Offset, err))
					<-w.quit
				}
				w.drain()
				return
			}
			w.inFlight = append(w.inFlight, inFlight{pending: pending, last: b.Records[len(b.Records)-1]})
			w.markDone()
		}
	}
}

// markDone marks, in order, the batches whose effects are durable.
func (w *worker) markDone() {
	n := 0
	for _, f := range w.inFlight {
		if !closed(f.pending) {
			break
		}
		n++
	}
	if n > 0 {
		w.client.MarkCommitRecords(w.inFlight[n-1].last)
		w.inFlight = w.inFlight[n:]
	}
}

// drain waits up to DrainTimeout for the batches in flight and marks those that
// become durable.
func (w *worker) drain() {
	if len(w.inFlight) == 0 {
		return
	}
	timer := time.NewTimer(w.g.cfg.DrainTimeout)
	defer timer.Stop()
	for len(w.inFlight) > 0 {
		select {
		case <-w.inFlight[0].pending:
			w.markDone()
		case <-timer.C:
			w.g.logger.Warn("gave up waiting for batches in flight; they will be consumed again",
				"topic", w.topic, "partition", w.partition, "batches", len(w.inFlight))
			return
		}
	}
}

func closed(p Pending) bool {
	if p == nil {
		return true
	}
	select {
	case <-p:
		return true
	default:
		return false
	}
}
