package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/notifier/email"
	"github.com/lockstream/lockstream/notifier/swrve"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/reading"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// soakDelivery is a row of the outbox, with its notification's event id.
type soakDelivery struct {
	id, client, sensor, eventType, channel, target, state, event string
}

// soakAttempt is a row of the attempt log.
type soakAttempt struct {
	attempt   int
	errorType string
}

func (n *soakNode) deliveries() []soakDelivery {
	n.t.Helper()
	rows, err := n.stores.Postgres.Pool().Query(context.Background(), `
		SELECT d.id::text, coalesce(d.client_id::text, ''), coalesce(d.sensor_id, ''), coalesce(d.event_type, ''),
		       d.channel, d.target, d.state, coalesce(nt.event_id, '')
		FROM deliveries d LEFT JOIN notifications nt ON nt.id = d.notification_id`)
	if err != nil {
		n.t.Fatalf("reading the outbox: %v", err)
	}
	defer rows.Close()
	var out []soakDelivery
	for rows.Next() {
		var d soakDelivery
		if err := rows.Scan(&d.id, &d.client, &d.sensor, &d.eventType, &d.channel, &d.target, &d.state, &d.event); err != nil {
			n.t.Fatalf("reading the outbox: %v", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		n.t.Fatalf("reading the outbox: %v", err)
	}
	return out
}

func (n *soakNode) attempts() map[string][]soakAttempt {
	n.t.Helper()
	rows, err := n.stores.Postgres.Pool().Query(context.Background(),
		`SELECT delivery_id::text, attempt, error_type FROM delivery_attempts`)
	if err != nil {
		n.t.Fatalf("reading the attempt log: %v", err)
	}
	defer rows.Close()
	out := map[string][]soakAttempt{}
	for rows.Next() {
		var id string
		var a soakAttempt
		if err := rows.Scan(&id, &a.attempt, &a.errorType); err != nil {
			n.t.Fatalf("reading the attempt log: %v", err)
		}
		out[id] = append(out[id], a)
	}
	if err := rows.Err(); err != nil {
		n.t.Fatalf("reading the attempt log: %v", err)
	}
	return out
}

// openState reports whether a delivery state can still change.
func openState(state string) bool {
	return !slices.Contains([]string{"SENT", "FAILED", "GIVEN_UP", "SUPERSEDED"}, state)
}

// quiesce waits, with the harness's generous deadline per step, until the
// processes are ready, every sensor is in its last published state, every
// reading published through a bridge reached Kafka, the fan-out has consumed
// every event, the outbox holds nothing open, and the lazy member's
// escalations were all made.
func (n *soakNode) quiesce(f *soakFleet) map[string]int {
	n.t.Helper()
	n.h.waitFor("every process to be ready after the chaos", n.allReady)
	final := f.final()
	n.h.waitFor("every sensor to be in its last published state", func() (bool, string) {
		got := map[string]int{}
		for _, s := range storagetest.AllSensorStates(n.t, n.stores.PostgresURL) {
			got[s.SensorID] = s.Data
		}
		for id, want := range final {
			if d, ok := got[id]; !ok || d != want {
				return false, fmt.Sprintf("%s is %d (known %v), last published %d", id, d, ok, want)
			}
		}
		return true, ""
	})
	n.h.waitFor("every reading published through a bridge to be on the readings topic", func() (bool, string) {
		missing := f.missingBridged(n.readings())
		return len(missing) == 0, fmt.Sprintf("%d missing, e.g. %v", len(missing), missing[:min(5, len(missing))])
	})
	o := offsets{t: n.t, client: n.admin}
	lazy := f.members["lazy"]
	n.h.waitFor("the fan-out to catch up, the outbox to settle and the lazy member's episodes to be escalated", func() (bool, string) {
		if ok, still := o.caughtUp(fanout.DefaultGroup, n.kafka.EventsTopic()); !ok {
			return false, still
		}
		for _, d := range n.deliveries() {
			if openState(d.state) {
				return false, fmt.Sprintf("delivery %s (%s %s) is %s", d.id, d.channel, d.eventType, d.state)
			}
		}
		e := n.escalations(lazy.id)
		for _, kind := range []string{"round", "push"} {
			for key, seq := range e.episodes {
				if e.covering(kind, seq) == 0 {
					return false, fmt.Sprintf("the lazy member's episode %s (first seq %d) has no %s escalation yet", key, seq, kind)
				}
			}
		}
		return len(e.episodes) > 0, "the lazy member has no episode"
	})
	return final
}

// readings reads the readings topic back as produced records, each valid one
// with its sensor and data, each invalid one with a reason.
func (n *soakNode) readings() []produced {
	var out []produced
	for _, r := range streamtest.ReadAll(n.t, n.kafka, n.kafka.ReadingsTopic()) {
		p := produced{record: record{key: r.Key, value: r.Value}, partition: r.Partition, offset: r.Offset}
		// Validated as the consumer validates a record of the topic.
		if rd, err := reading.ParseKeyed(r.Key, r.Value); err != nil {
			p.reason = err.Error()
		} else {
			p.sensor, p.data = string(rd.ID), rd.Data
		}
		out = append(out, p)
	}
	return out
}

// missingBridged returns the bridged readings (sensor and device time) not
// on the readings topic.
func (f *soakFleet) missingBridged(records []produced) []string {
	on := map[string]bool{}
	for _, r := range records {
		if rd, err := reading.ParseKeyed(r.key, r.value); err == nil && !rd.TS.IsZero() {
			on[fmt.Sprintf("%s %d", rd.ID, rd.TS.UnixMilli())] = true
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var missing []string
	for k := range f.bridged {
		if !on[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	return missing
}

// soakReport collects the figures the soak prints.
type soakReport struct{ lines []string }

func (r *soakReport) add(format string, args ...any) {
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}

func (r *soakReport) String() string { return "  " + strings.Join(r.lines, "\n  ") }

// check checks every invariant, each as a subtest named after it, and returns
// the figures.
func (n *soakNode) check(f *soakFleet, sinks *soakSinks, final map[string]int, outages map[string]time.Duration) *soakReport {
	r := &soakReport{}
	records := n.readings()
	want := expectOutcome(records, readingTimes(n.t, n.kafka), streamtest.TopicID(n.t, n.kafka, n.kafka.ReadingsTopic()))
	events := n.events()
	deliveries := n.deliveries()
	f.mu.Lock()
	r.add("published: %v good readings by intake, %d bad to Kafka, %d bad through the bridges, %d bad over HTTP; %d pushes",
		f.published, len(f.badKafka), len(f.badBridge), f.badHTTP, f.pushes)
	r.add("publishers: AMQP %s; MQTT %s", f.amqp.figures(), f.mqtt.figures())
	r.add("readings topic: %d records, %d valid, %d changes of state", len(records), len(want.valid), len(want.byID))
	f.mu.Unlock()

	n.t.Run("sensor_state is each sensor's last reading", func(t *testing.T) {
		checkState(t, n.stores.PostgresURL, want)
		for id, data := range final {
			if got, ok := want.final[id]; !ok || got.Data != data {
				t.Errorf("%s ends in %+v on the topic, last published %d", id, got, data)
			}
		}
	})
	n.t.Run("every change reached every linked client, in order", func(t *testing.T) {
		n.checkChanges(t, f, sinks, want, events, deliveries, r)
	})
	n.t.Run("lost and restored once per silence, no false loss", func(t *testing.T) {
		n.checkSilences(t, f, events, outages, r)
	})
	n.t.Run("every AMQP notification recorded once", func(t *testing.T) {
		n.checkNotes(t, f, deliveries, r)
	})
	n.t.Run("no escalation twice", func(t *testing.T) {
		n.checkEscalations(t, f, deliveries, r)
	})
	n.t.Run("Swrve under its rate in every second", func(t *testing.T) {
		st := sinks.swrve.Stats()
		r.add("Swrve: %d requests, %d OK, %d × 429, at most %d starts in a sliding second (rate %d)",
			st.Total, st.OK, st.TooMany, st.MaxPerSecond, n.cfg.swrveRate)
		if st.TooMany != 0 || st.MaxPerSecond > int64(n.cfg.swrveRate) {
			t.Errorf("Swrve answered %d requests 429 and saw %d starts within one second; want none and at most %d",
				st.TooMany, st.MaxPerSecond, n.cfg.swrveRate)
		}
	})
	n.t.Run("the attempt log equals what the sinks received", func(t *testing.T) {
		n.checkAttempts(t, f, sinks, deliveries, r)
	})
	n.t.Run("the DLQ holds exactly the bad inputs", func(t *testing.T) {
		n.checkSoakDLQ(t, f, r)
	})
	return r
}

// events returns lockstream.events' records, decoded, in order per partition.
func (n *soakNode) events() []event.Event {
	var out []event.Event
	for _, rec := range streamtest.ReadAll(n.t, n.kafka, n.kafka.EventsTopic()) {
		e, err := event.Decode(rec.Value)
		if err != nil {
			n.t.Fatalf("lockstream.events holds %q: %v", rec.Value, err)
		}
		out = append(out, e)
	}
	return out
}

// checkChanges: lockstream.events holds exactly the changes the readings
// topic implies (copies allowed), and each client linked to a sensor received
// each of its changes at least once — or its delivery was SUPERSEDED by a
// newer one, which DESIGN.md promises instead — with the first receipts in
// the order of the changes, the last change of every sensor received, and
// each loss before its restore.
func (n *soakNode) checkChanges(t *testing.T, f *soakFleet, sinks *soakSinks, want outcome, events []event.Event,
	deliveries []soakDelivery, r *soakReport) {
	seen := map[string]bool{}
	for _, e := range events {
		if e.Type != event.StateChanged {
			continue
		}
		w, ok := want.byID[e.ID]
		switch {
		case !ok:
			t.Errorf("unexpected event on lockstream.events: %s", describeEvent(e))
		case !sameEvent(e, w):
			t.Errorf("event %s is %s, want %s", e.ID, describeEvent(e), describeEvent(w))
		}
		seen[e.ID] = true
	}
	if len(seen) != len(want.byID) {
		t.Fatalf("lockstream.events holds %d of %d changes", len(seen), len(want.byID))
	}
	state := map[string]string{} // "<client id> <event id>" → webhook delivery state
	for _, d := range deliveries {
		if d.channel == "webhook" {
			state[d.client+" "+d.event] = d.state
		}
	}
	for name, sensors := range f.linked {
		client := f.clients[name]
		got, bad := sinks.hooks.received(name)
		if len(bad) > 0 {
			t.Errorf("webhooks that failed verification: %v", bad[:min(5, len(bad))])
		}
		first := map[string][]string{} // sensor → event ids in order of first receipt
		received := map[string]bool{}
		for _, h := range got {
			if !received[h.id] {
				received[h.id] = true
				first[h.sensor] = append(first[h.sensor], h.typ+" "+h.id)
			}
		}
		superseded := 0
		for _, s := range sensors {
			changes := want.changes[s]
			var order []string
			for i, c := range changes {
				switch {
				case received[c.ID]:
					order = append(order, c.ID)
				case i < len(changes)-1 && state[client+" "+c.ID] == "SUPERSEDED":
					superseded++
				default:
					t.Errorf("client %s never received change %s (delivery %q)", name, describeEvent(c), state[client+" "+c.ID])
				}
			}
			var changed []string
			lost := -1
			for i, fr := range first[s] {
				typ, id, _ := strings.Cut(fr, " ")
				switch event.Type(typ) {
				case event.StateChanged:
					changed = append(changed, id)
				case event.ConnectionLost:
					lost = i
				case event.ConnectionRestored:
					if lost < 0 {
						t.Errorf("client %s received %s's restore %s before any loss", name, s, id)
					}
					lost = -1
				}
			}
			if !slices.Equal(changed, order) {
				t.Errorf("client %s received %s's changes in the order %v, want %v", name, s, changed, order)
			}
		}
		r.add("client %q (%d sensors): %d webhook requests, %d distinct; %d changes superseded rather than sent",
			name, len(sensors), len(got), len(received), superseded)
	}
}

// checkSilences: each silent sensor lost and restored exactly once per
// silence, every other sensor never lost — but for one loss and restore more
// when its intake's broker was away so long that no reading of it could
// arrive within the heartbeat timeout (outageLosses).
func (n *soakNode) checkSilences(t *testing.T, f *soakFleet, events []event.Event, outages map[string]time.Duration, r *soakReport) {
	lost, restored := map[string]map[string]bool{}, map[string]map[string]bool{}
	for _, e := range events {
		var m map[string]map[string]bool
		switch e.Type {
		case event.ConnectionLost:
			m = lost
		case event.ConnectionRestored:
			m = restored
		case event.StateChanged:
			continue
		default:
			t.Errorf("unexpected %s event: %s", e.Type, describeEvent(e))
			continue
		}
		if m[e.SensorID] == nil {
			m[e.SensorID] = map[string]bool{}
		}
		m[e.SensorID][e.ID] = true
	}
	f.mu.Lock()
	silences := f.silences
	f.mu.Unlock()
	excused := outageLosses(outages, n.cfg.timeout)
	byOutage := 0
	for _, s := range f.sensors {
		want := 0
		if f.silent[s] {
			want = silences
		}
		extra := excused[s[:3]]
		got := len(lost[s])
		if got != len(restored[s]) || got < want || got > want+extra {
			t.Errorf("%s: %d connection_lost and %d connection_restored, want %d each (silent: %v; %d more excused by its broker's outage)",
				s, got, len(restored[s]), want, f.silent[s], extra)
		}
		if got > want {
			byOutage++
		}
	}
	r.add("silences: %d sensors silent %d times each (%v, heartbeat timeout %v); %d sensors lost, %d restored; "+
		"%d lost once more while their broker was away (intakes excused: %v)",
		len(f.silent), silences, n.cfg.silence, n.cfg.timeout, len(lost), len(restored), byOutage, excused)
}

// soakBridgeAway is how long a bridge may stay away after its broker is back:
// its reconnection back-off's cap with jitter (bridge/amqp and bridge/mqtt's
// DefaultReconnectMax, 5 s, +20 %), and a second for the first reading after.
const soakBridgeAway = 7 * time.Second

// outageLosses returns, by intake (the sensor ids' prefix), how many losses
// its broker's outages excuse: one when the broker was away so long that,
// with the bridge's way back, no reading could arrive within the heartbeat
// timeout. Such a loss is a true one: lockstream heard nothing for that long.
func outageLosses(outages map[string]time.Duration, timeout time.Duration) map[string]int {
	excused := map[string]int{}
	for intake, broker := range map[string]string{"amq": "rabbitmq", "mqt": "mosquitto"} {
		if d, ok := outages[broker]; ok && d+soakBridgeAway >= timeout {
			excused[intake] = 1
		}
	}
	return excused
}

// soakEscalations is a member's episodes (key → first seq) and its
// escalations: the (from, to] ranges of episode first seqs each round's
// email ("round") and push ("push") escalates, with their deliveries' states.
type soakEscalations struct {
	episodes map[string]int64
	ranges   map[string][][2]int64
	states   map[string]int // "<kind> <state>" → count
}

// covering returns how many escalations of kind cover the episode that
// starts at seq.
func (e soakEscalations) covering(kind string, seq int64) int {
	n := 0
	for _, r := range e.ranges[kind] {
		if seq > r[0] && seq <= r[1] {
			n++
		}
	}
	return n
}

func (n *soakNode) escalations(memberID string) soakEscalations {
	n.t.Helper()
	ctx := context.Background()
	pool := n.stores.Postgres.Pool()
	e := soakEscalations{episodes: map[string]int64{}, ranges: map[string][][2]int64{}, states: map[string]int{}}
	rows, err := pool.Query(ctx, `SELECT key, first_seq FROM escalation_episodes WHERE member_id = $1`, memberID)
	if err != nil {
		n.t.Fatalf("reading the episodes: %v", err)
	}
	for rows.Next() {
		var key string
		var seq int64
		if err := rows.Scan(&key, &seq); err != nil {
			n.t.Fatalf("reading the episodes: %v", err)
		}
		e.episodes[key] = seq
	}
	rows.Close()
	rows, err = pool.Query(ctx, `
		SELECT me.kind, me.from_seq, coalesce(me.to_seq, 0), d.state
		FROM member_emails me JOIN deliveries d ON d.id = me.delivery_id
		WHERE me.member_id = $1 AND me.kind IN ('round', 'push')`, memberID)
	if err != nil {
		n.t.Fatalf("reading the escalations: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, state string
		var from, to int64
		if err := rows.Scan(&kind, &from, &to, &state); err != nil {
			n.t.Fatalf("reading the escalations: %v", err)
		}
		e.ranges[kind] = append(e.ranges[kind], [2]int64{from, to})
		e.states[kind+" "+state]++
	}
	if err := rows.Err(); err != nil {
		n.t.Fatalf("reading the escalations: %v", err)
	}
	return e
}

// checkEscalations: the lazy member, who never reads, has each of its
// episodes (one per sensor of its client and per free-form type: they never
// end) escalated exactly once by email and once by push (DESIGN.md
// "Escalation of unseen messages": a round's email and push cover a range of
// episodes), every escalation SENT.
func (n *soakNode) checkEscalations(t *testing.T, f *soakFleet, deliveries []soakDelivery, r *soakReport) {
	lazy, reader := f.members["lazy"], f.members["reader"]
	e := n.escalations(lazy.id)
	for _, kind := range []string{"round", "push"} {
		for key, seq := range e.episodes {
			if c := e.covering(kind, seq); c != 1 {
				t.Errorf("the lazy member's episode %s (first seq %d) has %d %s escalations, want exactly 1", key, seq, c, kind)
			}
		}
	}
	for ks, c := range e.states {
		if !strings.HasSuffix(ks, " SENT") {
			t.Errorf("%d of the lazy member's escalations (%s) are not SENT", c, ks)
		}
	}
	if len(e.episodes) < len(f.linked["all"]) {
		t.Errorf("the lazy member has %d episodes, want at least one per sensor (%d)", len(e.episodes), len(f.linked["all"]))
	}
	readerEscalations := 0
	for _, d := range deliveries {
		if d.eventType == "unseen" && (d.target == "member:"+reader.id || d.target == "IOS:"+reader.device) {
			readerEscalations++
		}
	}
	f.mu.Lock()
	r.add("escalations: lazy member %d episodes in %d emails and %d pushes; reader (saw its inbox %d times) %d deliveries",
		len(e.episodes), len(e.ranges["round"]), len(e.ranges["push"]), f.readRuns, readerEscalations)
	f.mu.Unlock()
}

// attemptReach says what an attempt's error type tells of whether its
// receiver got it: an answer (none, or the receiver's own error status) means
// it did, once; a lease that expired (the retrier was killed), a timeout, a
// broken connection or a cancelled attempt may have reached it or not; any
// other error type was decided before a request went out (BUSY: no Swrve turn
// came while Redis was away; NOTHING_UNSEEN: the member saw everything first;
// STORE, NOT_OWNED…), so nothing reached the receiver.
func attemptReach(errorType string) (low, high int) {
	switch errorType {
	case "", webhook.ErrorTypeHTTPStatus, webhook.ErrorTypeRedirect, webhook.ErrorTypeAborted,
		swrve.ErrorTypeSwrve, email.ErrorTypeSMTPTransient, email.ErrorTypeSMTPPermanent:
		return 1, 1
	// The three senders spell TIMEOUT, CONNECTION and CANCELED alike.
	case storage.ErrorTypeLeaseExpired, webhook.ErrorTypeTimeout, webhook.ErrorTypeConnection, webhook.ErrorTypeCanceled,
		swrve.ErrorTypeOther:
		return 0, 1
	}
	return 0, 0
}

// checkAttempts: for each webhook delivery, every attempt a client received is
// logged, and every logged attempt was received as often as its error type
// says (attemptReach; DESIGN.md "Delivery states": a LEASE_EXPIRED one at
// most once); for email and Swrve, whose receivers do not see the attempt
// number, the same by count per recipient.
func (n *soakNode) checkAttempts(t *testing.T, f *soakFleet, sinks *soakSinks, deliveries []soakDelivery, r *soakReport) {
	attempts := n.attempts()
	received := map[string]map[int]int{} // "<client id> <event id>" → attempt → times
	for name, id := range f.clients {
		got, _ := sinks.hooks.received(name)
		for _, h := range got {
			k := id + " " + h.id
			if received[k] == nil {
				received[k] = map[int]int{}
			}
			received[k][h.attempt]++
		}
	}
	type span struct{ low, high int } // what a recipient must have received
	byRecipient := map[string]*span{}
	emails := map[string]string{"member:" + f.members["lazy"].id: f.members["lazy"].email,
		"member:" + f.members["reader"].id: f.members["reader"].email}
	logged, uncertain, unsent := 0, 0, map[string]int{}
	for _, d := range deliveries {
		as := attempts[d.id]
		logged += len(as)
		for _, a := range as {
			switch low, high := attemptReach(a.errorType); {
			case high == 0:
				unsent[a.errorType]++
			case low == 0:
				uncertain++
			}
		}
		if d.channel != "webhook" {
			recipient := d.target
			if d.channel == "email" {
				recipient = "email " + emails[d.target]
			}
			s := byRecipient[recipient]
			if s == nil {
				s = &span{}
				byRecipient[recipient] = s
			}
			for _, a := range as {
				low, high := attemptReach(a.errorType)
				s.low, s.high = s.low+low, s.high+high
			}
			continue
		}
		got := maps.Clone(received[d.client+" "+d.event])
		if got == nil {
			got = map[int]int{}
		}
		for _, a := range as {
			if low, high := attemptReach(a.errorType); got[a.attempt] < low || got[a.attempt] > high {
				t.Errorf("webhook delivery %s: logged attempt %d (error type %q) received %d times, want %d to %d",
					d.id, a.attempt, a.errorType, got[a.attempt], low, high)
			}
			delete(got, a.attempt)
		}
		if len(got) > 0 {
			t.Errorf("webhook delivery %s (event %s): attempts %v received but not logged", d.id, d.event, got)
		}
	}
	devices := sinks.devices()
	for recipient, s := range byRecipient {
		var got int
		if addr, ok := strings.CutPrefix(recipient, "email "); ok {
			got = sinks.mail.count(addr)
		} else {
			_, device, _ := strings.Cut(recipient, ":")
			got = devices[device]
		}
		if got < s.low || got > s.high {
			t.Errorf("%s received %d requests; its attempt log says %d to %d", recipient, got, s.low, s.high)
		}
	}
	r.add("attempt log: %d attempts of %d deliveries; %d that may or may not have reached the receiver (lease expired, timeout, connection); decided before any request: %v",
		logged, len(deliveries), uncertain, unsent)
}

// checkSoakDLQ: the DLQ holds every bad input — those produced to Kafka by
// their place, those sent through a bridge by source and value — and nothing
// else (copies allowed: a replayed batch or a redelivered message is rejected
// again).
func (n *soakNode) checkSoakDLQ(t *testing.T, f *soakFleet, r *soakReport) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seenKafka, seenBridge := map[pos]bool{}, map[string]bool{}
	records := streamtest.ReadAll(t, n.kafka, n.kafka.DLQTopic())
	for _, rec := range records {
		var reason, source string
		for _, h := range rec.Headers {
			switch h.Key {
			case reading.HeaderError:
				reason = string(h.Value)
			case reading.HeaderSource:
				source = string(h.Value)
			}
		}
		if where, ok := parseSource(source, n.kafka.ReadingsTopic()); ok {
			w, ok := f.badKafka[where]
			switch {
			case !ok:
				t.Errorf("the DLQ holds %s (%s, %q), which is not a bad input", source, reason, rec.Value)
			case w.reason != reason || !bytes.Equal(w.value, rec.Value):
				t.Errorf("DLQ record of %s: reason %q value %q, want %q %q", source, reason, rec.Value, w.reason, w.value)
			}
			seenKafka[where] = true
			continue
		}
		k := source + " " + string(rec.Value)
		if !f.badBridge[k] {
			t.Errorf("the DLQ holds %q from %s (%s), which is not a bad input", rec.Value, source, reason)
		}
		seenBridge[k] = true
	}
	if len(seenKafka) != len(f.badKafka) || len(seenBridge) != len(f.badBridge) {
		t.Errorf("the DLQ holds %d of the %d bad Kafka records and %d of the %d bad bridge messages",
			len(seenKafka), len(f.badKafka), len(seenBridge), len(f.badBridge))
	}
	r.add("DLQ: %d records, %d distinct bad inputs (%d expected)", len(records), len(seenKafka)+len(seenBridge), len(f.badKafka)+len(f.badBridge))
}

func (f *soakFleet) noteCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.notes
}

// checkNotes: each free-form notification, published twice with one
// message-id (and redelivered when a bridge died holding it), is one message
// in the lazy member's inbox and one email delivery.
func (n *soakNode) checkNotes(t *testing.T, f *soakFleet, deliveries []soakDelivery, r *soakReport) {
	notes := f.noteCount()
	dn := &deliveryNode{t: t, h: n.h, api: n.apis[0]}
	total, ms := dn.inbox(f.members["lazy"].token, "?seen=true&message-type=alert")
	subjects := map[string]int{}
	for _, m := range ms {
		subjects[m.Subject]++
	}
	for k := range notes {
		if c := subjects[fmt.Sprintf("soak note %d", k)]; c != 1 {
			t.Errorf("the lazy member's inbox holds notification %d %d times, want once", k, c)
		}
	}
	if total != notes || len(ms) != notes {
		t.Errorf("the lazy member's inbox holds %d alert messages (%d listed), want %d", total, len(ms), notes)
	}
	emails := 0
	for _, d := range deliveries {
		if d.channel == "email" && d.eventType == "alert" && d.target == "member:"+f.members["lazy"].id {
			emails++
		}
	}
	if emails != notes {
		t.Errorf("%d email deliveries of alert notifications, want %d", emails, notes)
	}
	r.add("AMQP notifications: %d published twice each; %d inbox messages, %d email deliveries", notes, total, emails)
}
