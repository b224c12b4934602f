package amqp

import (
	"log/slog"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// ackInterval is how often the acker looks for acknowledgements to send, and
// straggleAfter how long a finished message may wait behind an unfinished
// earlier one before it is acknowledged on its own.
const (
	ackInterval   = 2 * time.Millisecond
	straggleAfter = 50 * time.Millisecond
)

// tagState is what became of a delivery tag.
type tagState uint8

const (
	toAck  tagState = iota + 1 // finished; its ack is not sent yet
	sentOK                     // acknowledged on its own
	nacked                     // handed back to the broker
)

// acker sends one channel's acknowledgements, many at a time: finished
// deliveries are acknowledged with one basic.ack (multiple) for the longest run of
// settled tags from the lowest unsettled one, every ackInterval. A finished
// delivery stuck behind an unfinished earlier one (a slow notification, a retry
// pause) is acknowledged on its own after straggleAfter, so one slow message
// never holds the prefetch window. Nacks go out at once. Every frame is sent
// under the lock, so a multiple ack never covers a tag whose nack is still to
// come.
type acker struct {
	ch     *amqp091.Channel
	logger *slog.Logger

	mu    sync.Mutex
	next  uint64 // the lowest tag not yet settled; tags start at 1
	state map[uint64]tagState
	since map[uint64]time.Time // when a toAck tag finished
	stop  chan struct{}
	done  chan struct{}
}

func newAcker(ch *amqp091.Channel, logger *slog.Logger) *acker {
	a := &acker{ch: ch, logger: logger, next: 1, state: map[uint64]tagState{}, since: map[uint64]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go a.loop()
	return a
}

// ack marks tag finished; its acknowledgement goes out with the next batch.
func (a *acker) ack(tag uint64) {
	a.mu.Lock()
	a.state[tag] = toAck
	a.since[tag] = time.Now()
	a.mu.Unlock()
}

// nack hands tag back to the broker for redelivery, at once.
func (a *acker) nack(tag uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.ch.Nack(tag, false, true); err != nil {
		a.logger.Debug("nack failed; the broker redelivers the message when the channel closes", "err", err)
	}
	a.state[tag] = nacked
}

// close sends what is left to send and stops the loop.
func (a *acker) close() {
	close(a.stop)
	<-a.done
	a.flush(true)
}

func (a *acker) loop() {
	defer close(a.done)
	ticker := time.NewTicker(ackInterval)
	defer ticker.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-ticker.C:
			a.flush(false)
		}
	}
}

// flush acknowledges the settled run from the lowest unsettled tag with one
// multiple ack, and the stragglers beyond it (all of them when final) one by one.
func (a *acker) flush(final bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var upTo uint64
	for {
		s, ok := a.state[a.next]
		if !ok {
			break
		}
		if s == toAck {
			upTo = a.next
		}
		delete(a.state, a.next)
		delete(a.since, a.next)
		a.next++
	}
	if upTo > 0 {
		a.send(upTo, true)
	}
	now := time.Now()
	for tag, at := range a.since {
		if final || now.Sub(at) >= straggleAfter {
			a.send(tag, false)
			a.state[tag] = sentOK
			delete(a.since, tag)
		}
	}
}

func (a *acker) send(tag uint64, multiple bool) {
	if err := a.ch.Ack(tag, multiple); err != nil {
		// The channel is gone: the broker redelivers the messages to the next
		// consumer, which handles them again (duplicates, never a loss).
		a.logger.Debug("ack failed; the messages will be redelivered", "tag", tag, "err", err)
	}
}
