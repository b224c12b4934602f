package retrier

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/lockstream/lockstream/storage"
)

// handoff is the Retrier's side of a fan-out in the same process that creates
// webhook deliveries claimed and hands them over (fanout.Handoff): Reserve,
// Release, Deliver.
type handoff struct {
	mu sync.Mutex
	// run is where handed-over deliveries go: set while Run runs, nil before
	// and once it has stopped taking them.
	run *handoffRun
	// stopping: Run is stopping, so Reserve gives no more workers; what is
	// reserved still comes.
	stopping bool
	// reserved counts workers reserved and neither released nor delivered.
	reserved int
	// dispatchers are the goroutines starting handed-over deliveries.
	dispatchers sync.WaitGroup
}

// handoffRun is what a running Retrier starts handed-over deliveries with.
type handoffRun struct {
	work     context.Context
	lane     *lane
	outcomes chan<- outcome
}

// handoffBacklog is how many times its Workers the webhook lane takes handed
// over beyond its free workers: they wait in memory for a sender
// (lane.sending) instead of becoming PENDING rows that a claim must find,
// lock and update again. A deeper backlog hands over more of a burst (at 16:
// 30–55 % more webhooks a second in the pipeline benchmark), but with one
// client of ten failing the healthy nine then got 0.69–0.77 of their
// all-healthy rate instead of 0.86–0.99 (bench/RESULTS.md, 2026-11-27), so 4
// it stays. When attempts are slow the wait can outlast the lease: one that
// gets its sender too late to finish within it is given back instead of sent
// (tooLateToSend).
const handoffBacklog = 4

// Reserve takes up to n places in the webhook lane for deliveries the fan-out
// is about to create claimed, and returns how many it took and when their
// lease ends (now + Lease); 0 when the retrier has no webhook sender, is not
// running, is stopping or has no place (fanout.Handoff). A lane has a place
// per free worker and handoffBacklog × Workers more. Claims run meanwhile
// see the places as busy.
func (r *Retrier) Reserve(n int) (int, time.Time) {
	h := &r.handoff
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.run == nil || h.stopping || n <= 0 {
		return 0, time.Time{}
	}
	take := min(n, h.run.lane.free()+handoffBacklog*h.run.lane.workers)
	if take <= 0 {
		return 0, time.Time{}
	}
	h.run.lane.busy.Add(int64(take))
	h.reserved += take
	return take, r.cfg.Now().Add(r.cfg.Lease)
}

// Release gives back n reserved workers the fan-out did not use
// (fanout.Handoff).
func (r *Retrier) Release(n int) {
	if n <= 0 {
		return
	}
	h := &r.handoff
	h.mu.Lock()
	h.reserved -= n
	l := r.webhookLane()
	h.mu.Unlock()
	if l != nil {
		l.release(n)
	}
}

// Deliver starts the attempts of deliveries the fan-out created claimed and
// committed, each on a worker Reserve took (fanout.Handoff), with the targets
// the fan-out's transaction read (nil: read here): they are sent as claimed
// ones are, without a claim and without reading their targets again. It
// returns at once.
// Should the retrier have stopped meanwhile, they are given back, due at
// once, for a retrier to claim.
func (r *Retrier) Deliver(claimed []storage.Delivery, targets map[string]storage.DeliveryTarget) {
	h := &r.handoff
	h.mu.Lock()
	h.reserved -= len(claimed)
	run := h.run
	if run != nil {
		h.dispatchers.Add(1)
	}
	h.mu.Unlock()
	if run == nil {
		r.giveBack(claimed)
		return
	}
	r.m.handedOver.Add(float64(len(claimed)))
	go func() {
		defer h.dispatchers.Done()
		r.start(run.work, run.work, run.lane, claimed, run.outcomes, true, targets)
	}()
}

// giveBack puts handed-over deliveries the retrier could not start back to
// RETRY, due now, their attempt given back, and frees their workers.
func (r *Retrier) giveBack(claimed []storage.Delivery) {
	now := r.cfg.Now()
	finishes := make([]storage.DeliveryFinish, len(claimed))
	for i, d := range claimed {
		finishes[i] = storage.DeliveryFinish{ID: d.ID, Attempt: d.Attempts, State: storage.DeliveryRetry,
			NextAttemptAt: now, At: now, NotSent: true, Error: "handed over while the retrier stopped"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.WriteTimeout)
	defer cancel()
	if _, err := r.deps.Store.FinishDeliveries(ctx, finishes); err != nil {
		r.m.errors.WithLabelValues("finish").Inc()
		r.logger.ErrorContext(ctx, "giving back handed-over deliveries failed; they are retried when their lease runs out",
			"deliveries", len(claimed), "err", err)
	}
	if l := r.webhookLane(); l != nil {
		l.release(len(claimed))
	}
}

// Capacity is how many places Reserve has in all, free or not: the webhook
// lane's Workers and its backlog (fanout.Handoff); 0 without a webhook lane.
func (r *Retrier) Capacity() int {
	l := r.webhookLane()
	if l == nil {
		return 0
	}
	return (1 + handoffBacklog) * l.workers
}

// SendsEmail reports whether the lane the hand-over reserves places in also
// sends emails (fanout.Handoff): the fan-out then hands emails over too.
func (r *Retrier) SendsEmail() bool {
	l := r.webhookLane()
	return l != nil && slices.Contains(l.channels, storage.ChannelEmail)
}

// webhookLane is the lane that sends webhooks, or nil.
func (r *Retrier) webhookLane() *lane {
	for _, l := range r.lanes {
		if slices.Contains(l.channels, storage.ChannelWebhook) {
			return l
		}
	}
	return nil
}

// openHandoff makes the retrier take handed-over deliveries, started on work
// and recorded through outcomes.
func (r *Retrier) openHandoff(work context.Context, outcomes chan<- outcome) {
	l := r.webhookLane()
	if l == nil {
		return
	}
	h := &r.handoff
	h.mu.Lock()
	h.run = &handoffRun{work: work, lane: l, outcomes: outcomes}
	h.mu.Unlock()
}

// closeHandoff stops reserving workers, waits (up to DrainTimeout) for the
// reserved ones to be delivered or released, then stops taking deliveries
// (later ones are given back) and waits for those taken to have started.
func (r *Retrier) closeHandoff() {
	h := &r.handoff
	h.mu.Lock()
	h.stopping = true
	h.mu.Unlock()
	deadline := time.Now().Add(r.cfg.DrainTimeout)
	for {
		h.mu.Lock()
		reserved := h.reserved
		if reserved <= 0 || time.Now().After(deadline) {
			h.run = nil
			h.mu.Unlock()
			break
		}
		h.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	h.dispatchers.Wait()
}
