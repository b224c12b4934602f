package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/internal/pgutil"
	"github.com/lockstream/lockstream/registry/secretbox"
)

// Channel is the way a delivery reaches its client.
type Channel string

// The delivery channels.
const (
	ChannelWebhook Channel = "webhook"
	ChannelEmail   Channel = "email"
	ChannelSwrve   Channel = "swrve"
)

// DeliveryState is where a delivery is in its life; DESIGN.md "Delivery states".
type DeliveryState string

// The delivery states.
const (
	// DeliveryScheduled waits for its window; it is due at NextAttemptAt.
	DeliveryScheduled DeliveryState = "SCHEDULED"
	// DeliveryPending is due at NextAttemptAt and not taken yet.
	DeliveryPending DeliveryState = "PENDING"
	// DeliveryInFlight is claimed by a retrier until LeasedUntil.
	DeliveryInFlight DeliveryState = "IN_FLIGHT"
	// DeliveryRetry failed retryably and is due again at NextAttemptAt.
	DeliveryRetry DeliveryState = "RETRY"
	// DeliveryPaused is a webhook delivery kept while its endpoint is disabled;
	// enabling the endpoint makes it PENDING again.
	DeliveryPaused DeliveryState = "PAUSED"
	// DeliverySent was accepted by the receiver.
	DeliverySent DeliveryState = "SENT"
	// DeliveryFailed failed in a way another attempt would not fix.
	DeliveryFailed DeliveryState = "FAILED"
	// DeliveryGivenUp ran out of attempts.
	DeliveryGivenUp DeliveryState = "GIVEN_UP"
	// DeliverySuperseded was made moot by a newer state of the same sensor.
	DeliverySuperseded DeliveryState = "SUPERSEDED"
)

// Valid reports whether s is one of the known states.
func (s DeliveryState) Valid() bool {
	switch s {
	case DeliveryScheduled, DeliveryPending, DeliveryInFlight, DeliveryRetry, DeliveryPaused,
		DeliverySent, DeliveryFailed, DeliveryGivenUp, DeliverySuperseded:
		return true
	}
	return false
}

// ErrorTypeLeaseExpired is the error type of the attempt a lease covered
// when the lease ran out with no outcome recorded (the retrier stopped or
// hung): the attempt may or may not have reached the receiver.
const ErrorTypeLeaseExpired = "LEASE_EXPIRED"

// leaseExpiredError is the last_error of a requeued delivery and the error of
// its expired attempt.
const leaseExpiredError = "lease expired: the retrier holding it stopped or hung; whether the attempt reached the receiver is unknown"

// SupersededError is the last_error of a superseded delivery.
const SupersededError = "superseded by a newer state_changed of the same sensor"

// NotificationInput is one event for the fan-out to notify its sensor's clients of.
type NotificationInput struct {
	// EventID is the event's deterministic id; a replayed event creates nothing.
	EventID  string
	Type     string
	SensorID string
	// Data and Previous are nil where the event has none.
	Data     *int
	Previous *int
	// At is when the event happened; it orders a sensor's notifications.
	At time.Time
	// Site and Sensors are set for a site event: it reaches the clients of
	// any of Sensors (once each), not only SensorID's.
	Site    string
	Sensors []string
	// LostSince, on a connection_restored, is the sensor's last reading
	// before the loss; nil otherwise.
	LostSince *time.Time
}

// is about.
type Delivery struct {
	ID string
	// NotificationID, ClientID, SensorID and the event fields are empty for
	// deliveries that belong to no sensor event.
	NotificationID string
	ClientID       string
	SensorID       string
	Channel        Channel
	// Target is the device ("IOS:<push key>") for swrve, empty otherwise.
	Target   string
	State    DeliveryState
	Attempts int
	// NextAttemptAt is when a SCHEDULED, PENDING or RETRY delivery is due.
	NextAttemptAt time.Time
	// LeasedUntil is when an IN_FLIGHT delivery's claim runs out; zero otherwise.
	LeasedUntil    time.Time
	LastError      string
	LastHTTPStatus int
	EventID        string
	EventType      string
	Data           *int
	Previous       *int
	EventAt        time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	// Seq is the notification's number in its client's sequence (see
	// ListClientEvents); 0 for deliveries of no notification or from before
	// seqs existed.
	Seq int64
	// Site and Sensors are a site event's site and the sensors it lists;
	// empty for other events.
	Site    string
	Sensors []string
	// LostSince is a connection_restored's last reading before the loss; nil
	// for other events.
	LostSince *time.Time
}

// deliveryColumns are selected by every delivery query (d = deliveries, n =
// notifications, LEFT JOINed), in scanDelivery's order.
const deliveryColumns = `d.id::text, coalesce(d.notification_id::text, ''), coalesce(d.client_id::text, ''),
	coalesce(d.sensor_id, ''), d.channel, d.target, d.state, d.attempts, d.next_attempt_at, d.leased_until,
	d.last_error, coalesce(d.last_http_status, 0), coalesce(n.event_id, ''), coalesce(d.event_type, ''),
	n.data, n.previous, d.event_at, d.created_at, d.updated_at, coalesce(n.client_seq, 0),
	coalesce(n.site, ''), n.sensors, n.lost_since`

func scanDelivery(row pgx.Row) (Delivery, error) {
	var (
		d              Delivery
		leased         *time.Time
		data, previous *int16
	)
	err := row.Scan(&d.ID, &d.NotificationID, &d.ClientID, &d.SensorID, &d.Channel, &d.Target, &d.State,
		&d.Attempts, &d.NextAttemptAt, &leased, &d.LastError, &d.LastHTTPStatus, &d.EventID, &d.EventType,
		&data, &previous, &d.EventAt, &d.CreatedAt, &d.UpdatedAt, &d.Seq,
		&d.Site, &d.Sensors, &d.LostSince)
	if err != nil {
		return Delivery{}, err
	}
	if leased != nil {
		d.LeasedUntil = *leased
	}
	d.Data, d.Previous = outboxIntPtr(data), outboxIntPtr(previous)
	return d, nil
}

func collectDeliveries(rows pgx.Rows) ([]Delivery, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) { return scanDelivery(row) })
}

func outboxIntPtr(v *int16) *int {
	if v == nil {
		return nil
	}
	i := int(*v)
	return &i
}

func outboxInt16Ptr(v *int) *int16 {
	if v == nil {
		return nil
	}
	i := int16(*v)
	return &i
}

// QueueClientLocks queues the statement that takes a KEY SHARE lock on the
// clients of the batch's new notifications, in id order, before the inbox
// write locks their members' counters and the seq statement their counters:
// DeleteClient locks the client first and then deletes its members, so taking
// the client last deadlocked the two. KEY SHARE locks do not conflict with
// each other, so fan-out writers do not wait on one another here.
func QueueClientLocks(b *pgx.Batch, created []NewNotification) {
	if len(created) == 0 {
		return
	}
	clients := make([]string, len(created))
	for i, n := range created {
		clients[i] = n.ClientID
	}
	queueExec(b, "locking the batch's clients", `
		SELECT count(*) FROM (
			SELECT 1 FROM clients WHERE id = ANY ($1::uuid[]) ORDER BY id FOR KEY SHARE
		) AS locked`, clients)
}

// supersedeKey is the (client, sensor, channel, target) of deliveries that go
// older resumed one of the same client and channel is open.
func (p *Postgres) ClaimDeliveries(ctx context.Context, now time.Time, limit int, lease time.Duration, channels ...Channel) ([]Delivery, error) {
	if limit <= 0 {
		return nil, nil
	}
	var channelFilter []string
	for _, c := range channels {
		channelFilter = append(channelFilter, string(c))
	}
	rows, err := p.pool.Query(ctx, claimDeliveriesSQL,
		now, limit, lease, channelFilter)
	if err != nil {
		return nil, fmt.Errorf("claiming deliveries: %w", err)
	}
	claimed, err := collectDeliveries(rows)
	if err != nil {
		return nil, fmt.Errorf("claiming deliveries: %w", err)
	}
	// RETURNING has no ORDER BY: hand them out oldest due first, as claimed.
	slices.SortFunc(claimed, func(a, b Delivery) int { return a.NextAttemptAt.Compare(b.NextAttemptAt) })
	return claimed, nil
}

// claimDeliveriesSQL is ClaimDeliveries' statement: $1 now, $2 limit, $3 lease,
// $4 channels (NULL: all).
const claimDeliveriesSQL = `
		WITH due AS (
			-- Migrations 00120 and 00200: the ordered walk of the due index whatever the
			-- statistics say (a freshly filled outbox is not analyzed yet).
			SELECT * FROM lockstream_due_deliveries($1, $2, $4::text[])
		)
		UPDATE deliveries d
		SET state = 'IN_FLIGHT', attempts = d.attempts + 1, leased_until = $1::timestamptz + $3::interval,
		    updated_at = now()
		FROM due LEFT JOIN notifications n ON n.id = due.notification_id AND n.event_at = due.event_at
		WHERE d.id = due.id AND d.event_at = due.event_at
		RETURNING ` + deliveryColumns

// DeliveryFinish is the outcome of one attempt of a claimed delivery.
type DeliveryFinish struct {
	ID string
	// Attempt is the delivery's Attempts as claimed. It fences off late results:
	// an outcome is recorded only while the delivery still carries this attempt
	// number and is IN_FLIGHT (or PENDING again after its lease ran out and
	// nobody claimed it since).
	Attempt int
	// State is SENT, RETRY, FAILED or GIVEN_UP.
	State DeliveryState
	// NextAttemptAt is when a RETRY is due.
	NextAttemptAt time.Time
	// Error says why the attempt did not succeed; empty for SENT.
	Error string
	// HTTPStatus is the receiver's answer; 0 if none.
	HTTPStatus int
	// ErrorType, AnswerCode, AnswerMessage, Duration and At describe the
	// attempt for its row in delivery_attempts (see DeliveryAttempt).
	ErrorType     string
	AnswerCode    int
	AnswerMessage string
	Duration      time.Duration
	At            time.Time
	// NotSent says no send was made (the retrier could not read what to send):
	// the claim's attempt is given back (Attempts one lower), no attempt row is
	// written, and State must be RETRY.
	NotSent bool
}

// FinishedDelivery is the state a finished or requeued delivery was left in.
type FinishedDelivery struct {
	ID      string
	Channel Channel
	State   DeliveryState
	// Frees says a finished delivery held back another that may be claimed
	// now: it is no longer open, and a newer delivery of its (client, sensor,
	// channel, target) waits (SCHEDULED, PENDING or RETRY), or it was resumed
	// (the next resumed one of its client waits on it). False for requeued
	// ones.
	Frees bool
}

// finishArgs are FinishDeliveries' arrays, one element per outcome.
type finishArgs struct {
	ids, states, errs, errorTypes, answerMessages []string
	attempts, statuses, answerCodes, durations    []int32
	next                                          []*time.Time
	ats                                           []time.Time
	notSent                                       []bool
}

func newFinishArgs(finishes []DeliveryFinish) (finishArgs, error) {
	var a finishArgs
	for i, f := range finishes {
		switch {
		case f.State != DeliverySent && f.State != DeliveryRetry && f.State != DeliveryFailed && f.State != DeliveryGivenUp:
			return a, fmt.Errorf("finishing delivery %s: cannot finish as %q", f.ID, f.State)
		case f.NotSent && f.State != DeliveryRetry:
			return a, fmt.Errorf("finishing delivery %s: an attempt not sent can only be retried, not %q", f.ID, f.State)
		case uuid.Validate(f.ID) != nil:
			return a, fmt.Errorf("finishing delivery %s: %w", f.ID, ErrNotFound)
		}
		var next *time.Time
		if f.State == DeliveryRetry {
			next = &finishes[i].NextAttemptAt
		}
		at := f.At
		if at.IsZero() {
			at = time.Now()
		}
		a.ids, a.attempts, a.states, a.next = append(a.ids, f.ID), append(a.attempts, int32(f.Attempt)),
			append(a.states, string(f.State)), append(a.next, next)
		a.errs, a.statuses, a.errorTypes = append(a.errs, f.Error), append(a.statuses, int32(f.HTTPStatus)),
			append(a.errorTypes, f.ErrorType)
		a.answerCodes, a.answerMessages = append(a.answerCodes, int32(f.AnswerCode)), append(a.answerMessages, f.AnswerMessage)
		a.durations = append(a.durations, int32(min(max(f.Duration.Milliseconds(), 0), math.MaxInt32)))
		a.ats, a.notSent = append(a.ats, at), append(a.notSent, f.NotSent)
	}
	return a, nil
}

// FinishDeliveries records the outcomes of attempts and their rows in
// delivery_attempts in one statement (one transaction: an attempt is in the log
// exactly when its outcome is in the outbox), and returns the state each
// recorded delivery is in now; outcomes fenced off (see DeliveryFinish.Attempt)
// are left out, though their attempt is still logged (recorded false): the
// send was made. A RETRY or GIVEN_UP state_changed delivery becomes SUPERSEDED
// instead when a newer state_changed of the same (client, sensor, channel,
// target) is waiting behind it. An outcome NotSent gives the attempt back and
// logs nothing.
func (p *Postgres) FinishDeliveries(ctx context.Context, finishes []DeliveryFinish) ([]FinishedDelivery, error) {
	if len(finishes) == 0 {
		return nil, nil
	}
	a, err := newFinishArgs(finishes)
	if err != nil {
		return nil, err
	}
	rows, err := p.pool.Query(ctx, finishDeliveriesSQL, a.ids, a.attempts, a.states, a.next, a.errs, a.statuses,
		a.errorTypes, a.answerCodes, a.answerMessages, a.durations, a.ats, a.notSent)
	if err != nil {
		return nil, fmt.Errorf("finishing %d deliveries: %w", len(finishes), err)
	}
	finished, err := collectFinished(rows)
	if err != nil {
		return nil, fmt.Errorf("finishing %d deliveries: %w", len(finishes), err)
	}
	return finished, nil
}

// finishDeliveriesSQL is FinishDeliveries' statement: $1-$12 the outcomes.
// An outcome of a webhook handed over in flight (migration 00240) deletes its
// row in flight (h) and makes a delivery row only when the attempt did not
// succeed (hd); the others update their delivery (locked, u).
// Whether a newer state waits behind one is the SQL function
// lockstream_newer_open_states (migration 00242), which the lease sweep
// (requeueExpiredLeasesSQL) asks too; the planner inlines it.
const finishDeliveriesSQL = `
		WITH f AS (
			SELECT * FROM unnest($1::uuid[], $2::int4[], $3::text[], $4::timestamptz[], $5::text[], $6::int4[],
			                     $7::text[], $8::int4[], $9::text[], $10::int4[], $11::timestamptz[], $12::bool[])
				AS f (id, attempt, state, next_attempt_at, error, http_status,
				      error_type, answer_code, answer_message, duration_ms, at, not_sent)
		), h AS (
			DELETE FROM webhooks_in_flight w USING f WHERE w.id = f.id
			RETURNING w.id, w.notification_id, w.client_id, w.sensor_id, w.event_id, w.event_type, w.event_at,
			          w.created_at, f.attempt, f.state, f.next_attempt_at, f.error, f.http_status, f.error_type,
			          f.answer_code, f.answer_message, f.duration_ms, f.at, f.not_sent
		), hd AS (
			-- A handed-over webhook's attempt that did not succeed: now it needs
			-- a delivery row, in the state the attempt left it.
			INSERT INTO deliveries (id, notification_id, client_id, sensor_id, event_type, channel, target, state,
			                        attempts, next_attempt_at, last_error, last_http_status, event_at, created_at)
			SELECT h.id, h.notification_id, h.client_id, h.sensor_id, h.event_type, 'webhook', '',
			       CASE WHEN h.state IN ('RETRY', 'GIVEN_UP') AND h.event_type = 'state_changed' AND EXISTS (
			                SELECT FROM lockstream_newer_open_states(h.client_id, h.sensor_id, 'webhook', '', h.event_at))
			            THEN 'SUPERSEDED' ELSE h.state END,
			       CASE WHEN h.not_sent THEN greatest(h.attempt - 1, 0) ELSE h.attempt END,
			       coalesce(h.next_attempt_at, h.at), h.error, nullif(h.http_status, 0), h.event_at, h.created_at
			FROM h WHERE h.state <> 'SENT'
			RETURNING id, state
		), ho AS (
			-- Every handed-over outcome, and whether a webhook of its key waits
			-- for it (the claim holds those back while it is in flight).
			SELECT h.id, coalesce(hd.state, h.state) AS state,
			       coalesce(hd.state, h.state) <> 'RETRY' AND EXISTS (
			           SELECT 1 FROM deliveries o
			           WHERE o.client_id = h.client_id AND o.sensor_id = h.sensor_id
			             AND o.channel = 'webhook' AND o.target = ''
			             AND o.state IN ('SCHEDULED', 'PENDING', 'RETRY') AND o.event_at >= h.event_at) AS frees
			FROM h LEFT JOIN hd ON hd.id = h.id
		), locked AS (
			-- The outcome with its delivery, locked. Each step carries the
			-- outcome along rather than joining f again: the planner takes an
			-- unnest of a parameter for 10 rows, and a join of two CTEs by
			-- nested loop, which made the statement quadratic in the batch
			-- (121,452 rows compared for 349 outcomes).
			SELECT d.id AS delivery_id, d.event_at AS delivery_at, f.*
			FROM f JOIN deliveries d ON d.id = f.id
			WHERE d.attempts = f.attempt AND d.state IN ('IN_FLIGHT', 'PENDING')
			  AND f.id NOT IN (SELECT id FROM h)
			ORDER BY d.id
			FOR UPDATE OF d
		), u AS (
			UPDATE deliveries d
			SET state = CASE
			        WHEN l.state IN ('RETRY', 'GIVEN_UP') AND d.event_type = 'state_changed' AND EXISTS (
			            SELECT FROM lockstream_newer_open_states(d.client_id, d.sensor_id, d.channel, d.target, d.event_at))
			        THEN 'SUPERSEDED' ELSE l.state END,
			    attempts = CASE WHEN l.not_sent THEN greatest(d.attempts - 1, 0) ELSE d.attempts END,
			    next_attempt_at = coalesce(l.next_attempt_at, d.next_attempt_at),
			    leased_until = NULL,
			    last_error = l.error,
			    last_http_status = nullif(l.http_status, 0),
			    updated_at = now()
			FROM locked l
			WHERE d.id = l.delivery_id AND d.event_at = l.delivery_at
			RETURNING d.id, d.channel, d.state, d.client_id, d.sensor_id, d.notification_id, d.event_at,
			          l.attempt, l.http_status, l.error_type, l.error, l.answer_code, l.answer_message,
			          l.duration_ms, l.at, l.not_sent,
			          -- Whether a delivery waits for this one (the claim's order checks).
			          d.state <> 'RETRY' AND (d.resumed_at IS NOT NULL OR EXISTS (
			              SELECT 1 FROM deliveries o
			              WHERE o.client_id = d.client_id AND o.sensor_id = d.sensor_id
			                AND o.channel = d.channel AND o.target = d.target
			                AND o.state IN ('SCHEDULED', 'PENDING', 'RETRY')
			                AND (o.event_at, o.seq) > (d.event_at, d.seq))) AS frees
		), tried AS (
			-- Every attempt sent: recorded (in u or ho), or fenced off (the
			-- delivery moved on; d is read as of the statement's start, which is
			-- all the log needs of it).
			SELECT u.id, u.client_id, u.sensor_id, u.notification_id, u.event_at, NULL::text AS event_id, u.channel,
			       u.attempt, u.state, true AS recorded, u.http_status, u.error_type, u.error, u.answer_code,
			       u.answer_message, u.duration_ms, u.at
			FROM u WHERE NOT u.not_sent
			UNION ALL
			SELECT h.id, h.client_id, h.sensor_id, h.notification_id, h.event_at, h.event_id, 'webhook',
			       h.attempt, ho.state, true, h.http_status, h.error_type, h.error, h.answer_code,
			       h.answer_message, h.duration_ms, h.at
			FROM h JOIN ho ON ho.id = h.id WHERE NOT h.not_sent
			UNION ALL
			SELECT f.id, d.client_id, d.sensor_id, d.notification_id, d.event_at, NULL, d.channel, f.attempt,
			       f.state, false, f.http_status, f.error_type, f.error, f.answer_code,
			       f.answer_message, f.duration_ms, f.at
			FROM f JOIN deliveries d ON d.id = f.id
			WHERE NOT f.not_sent AND f.id NOT IN (SELECT id FROM u) AND f.id NOT IN (SELECT id FROM h)
		), logged AS (
			INSERT INTO delivery_attempts (delivery_id, client_id, sensor_id, event_id, notification_id, channel,
			                               attempt, status, recorded, http_status, error_type, error, answer_code,
			                               answer_message, duration_ms, at)
			SELECT t.id, t.client_id, t.sensor_id, coalesce(t.event_id, n.event_id), t.notification_id, t.channel,
			       t.attempt, t.state, t.recorded, t.http_status, t.error_type, t.error, t.answer_code,
			       t.answer_message, t.duration_ms, t.at
			FROM tried t LEFT JOIN notifications n
			     ON t.event_id IS NULL AND n.id = t.notification_id AND n.event_at = t.event_at
			ORDER BY t.at, t.id
		)
		SELECT id::text, channel, state, frees FROM u
		UNION ALL
		SELECT id::text, 'webhook', state, frees FROM ho`

func collectFinished(rows pgx.Rows) ([]FinishedDelivery, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (FinishedDelivery, error) {
		var f FinishedDelivery
		err := row.Scan(&f.ID, &f.Channel, &f.State, &f.Frees)
		return f, err
	})
}

// RequeueExpiredLeases returns IN_FLIGHT deliveries whose lease ran out before now
// (their retrier died or hung) to PENDING, due at once, or to SUPERSEDED when a
// newer state waits behind them, and returns what became of each. Rows being
// finished right now are skipped. The attempt each lease covered is logged
// (error type ErrorTypeLeaseExpired, status the state the delivery is left
// in): it was claimed, so it may have been sent, and the log must not leave
// out what a receiver may have had.
func (p *Postgres) RequeueExpiredLeases(ctx context.Context, now time.Time) ([]FinishedDelivery, error) {
	rows, err := p.pool.Query(ctx, requeueExpiredLeasesSQL, now, leaseExpiredError, ErrorTypeLeaseExpired)
	if err != nil {
		return nil, fmt.Errorf("requeueing expired leases: %w", err)
	}
	requeued, err := collectFinished(rows)
	if err != nil {
		return nil, fmt.Errorf("requeueing expired leases: %w", err)
	}
	return requeued, nil
}

// requeueExpiredLeasesSQL is RequeueExpiredLeases' statement: $1 now, $2 the
// last error and $3 the error type of the attempt each lease covered.
const requeueExpiredLeasesSQL = `
		WITH expired AS (
			SELECT id, event_at FROM deliveries
			WHERE state = 'IN_FLIGHT' AND leased_until < $1
			FOR UPDATE SKIP LOCKED
		), u AS (
			UPDATE deliveries d
			SET state = CASE
			        WHEN d.event_type = 'state_changed' AND EXISTS (
			            SELECT FROM lockstream_newer_open_states(d.client_id, d.sensor_id, d.channel, d.target, d.event_at))
			        THEN 'SUPERSEDED' ELSE 'PENDING' END,
			    next_attempt_at = $1, leased_until = NULL,
			    last_error = $2, updated_at = now()
			FROM expired
			WHERE d.id = expired.id AND d.event_at = expired.event_at
			RETURNING d.id, d.client_id, d.sensor_id, d.notification_id, d.event_at, d.channel, d.attempts, d.state
		), gone AS (
			-- Handed-over webhooks in flight (migration 00240) whose lease ran
			-- out: each becomes a delivery, as an expired claim would be left.
			DELETE FROM webhooks_in_flight w
			WHERE w.id IN (SELECT id FROM webhooks_in_flight WHERE leased_until < $1 FOR UPDATE SKIP LOCKED)
			RETURNING w.*
		), gd AS (
			INSERT INTO deliveries (id, notification_id, client_id, sensor_id, event_type, channel, target, state,
			                        attempts, next_attempt_at, last_error, event_at, created_at)
			SELECT g.id, g.notification_id, g.client_id, g.sensor_id, g.event_type, 'webhook', '',
			       CASE WHEN g.event_type = 'state_changed' AND EXISTS (
			                SELECT FROM lockstream_newer_open_states(g.client_id, g.sensor_id, 'webhook', '', g.event_at))
			            THEN 'SUPERSEDED' ELSE 'PENDING' END,
			       1, $1, $2, g.event_at, g.created_at
			FROM gone g
			RETURNING id, channel, state
		), logged AS (
			-- The attempt the lease covered: its outcome never came, and whether
			-- it reached the receiver is unknown, but it happened (a claim is an
			-- attempt), so the log shows it.
			INSERT INTO delivery_attempts (delivery_id, client_id, sensor_id, event_id, notification_id, channel,
			                               attempt, status, recorded, error_type, error, at)
			SELECT u.id, u.client_id, u.sensor_id, n.event_id, u.notification_id, u.channel, u.attempts, u.state,
			       true, $3, $2, $1
			FROM u LEFT JOIN notifications n ON n.id = u.notification_id AND n.event_at = u.event_at
			WHERE u.attempts > 0
			UNION ALL
			SELECT g.id, g.client_id, g.sensor_id, g.event_id, g.notification_id, 'webhook', 1, gd.state, true,
			       $3, $2, $1
			FROM gone g JOIN gd ON gd.id = g.id
		)
		SELECT id::text, channel, state, false FROM u
		UNION ALL
		SELECT id::text, channel, state, false FROM gd`

// RetryDelivery makes a FAILED or GIVEN_UP delivery PENDING again, due now, with a
// fresh budget of attempts (POST /v1/deliveries/{id}/retry), and returns it. It
// returns ErrNotFound for an unknown id and ErrConflict for a delivery in another
// state.
func (p *Postgres) RetryDelivery(ctx context.Context, id string) (Delivery, error) {
	if uuid.Validate(id) != nil {
		return Delivery{}, fmt.Errorf("retrying delivery %s: %w", id, ErrNotFound)
	}
	var prior DeliveryState
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT state FROM deliveries WHERE id = $1 FOR UPDATE`, id).Scan(&prior)
		if errors.Is(err, pgx.ErrNoRows) {
			// A handed-over webhook in flight or delivered has no row.
			d, getErr := p.GetDelivery(ctx, id)
			if getErr != nil {
				return getErr
			}
			prior = d.State
		} else if err != nil {
			return pgutil.MapError(err)
		}
		if prior != DeliveryFailed && prior != DeliveryGivenUp {
			return fmt.Errorf("%w: the delivery is %s; only FAILED and GIVEN_UP ones are retried", ErrConflict, prior)
		}
		_, err = tx.Exec(ctx, `
			UPDATE deliveries SET state = 'PENDING', attempts = 0, next_attempt_at = now(), leased_until = NULL,
			       updated_at = now()
			WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return Delivery{}, fmt.Errorf("retrying delivery %s: %w", id, err)
	}
	return p.GetDelivery(ctx, id)
}

// GetDelivery returns the delivery, or ErrNotFound. A webhook handed over by
// the fan-out has no delivery row while its first attempt is in flight, nor
// after it succeeded (migration 00240): it is read from its row in flight
// (IN_FLIGHT), or from its attempt (SENT, attempt 1).
func (p *Postgres) GetDelivery(ctx context.Context, id string) (Delivery, error) {
	if uuid.Validate(id) != nil {
		return Delivery{}, fmt.Errorf("getting delivery %s: %w", id, ErrNotFound)
	}
	d, err := scanDelivery(p.pool.QueryRow(ctx, `SELECT `+deliveryColumns+`
		FROM (`+anyDeliverySQL+`) d
		LEFT JOIN notifications n ON n.id = d.notification_id AND n.event_at = d.event_at`, id))
	if err != nil {
		return Delivery{}, fmt.Errorf("getting delivery %s: %w", id, pgutil.MapError(err))
	}
	return d, nil
}

// The three places a delivery is, as the same columns (deliveryColumns reads
// them as d): its row; a handed-over webhook's row in flight (IN_FLIGHT on its
// first attempt); and a handed-over webhook's SENT attempt a (it has no other
// row), joined to its notification n (migration 00240).
const (
	deliveryRowColumns = `id, notification_id, client_id, sensor_id, channel, target, state, attempts,
		next_attempt_at, leased_until, last_error, last_http_status, event_type, event_at, created_at, updated_at`
	inFlightDeliveryColumns = `id, notification_id, client_id, sensor_id, 'webhook', '', 'IN_FLIGHT', 1,
		event_at, leased_until, '', NULL, event_type, event_at, created_at, created_at`
	sentAttemptDeliveryColumns = `a.delivery_id, n.id, a.client_id, a.sensor_id, 'webhook', '', 'SENT', a.attempt,
		n.event_at, NULL, a.error, nullif(a.http_status, 0), n.type, n.event_at, n.created_at, a.at`
)

// anyDeliverySQL finds delivery $1 wherever it is: its row, its row in flight
// (a handed-over webhook on its first attempt), or the attempt that delivered
// it (a handed-over webhook whose first attempt succeeded), in that order.
const anyDeliverySQL = `
		SELECT * FROM (
			SELECT ` + deliveryRowColumns + `, 1 AS source FROM deliveries WHERE id = $1
			UNION ALL
			SELECT ` + inFlightDeliveryColumns + `, 2 FROM webhooks_in_flight WHERE id = $1
			UNION ALL
			SELECT ` + sentAttemptDeliveryColumns + `, 3
			FROM delivery_attempts a JOIN notifications n ON n.id = a.notification_id
			WHERE a.delivery_id = $1 AND a.channel = 'webhook' AND a.status = 'SENT' AND a.recorded
		) x ORDER BY source LIMIT 1`

// DeliveryFilter narrows a client's delivery history.
type DeliveryFilter struct {
	// From and To bound the event time, From inclusive, To exclusive; zero means
	// unbounded.
	From, To time.Time
	// State keeps only deliveries in that state; empty keeps all.
	State DeliveryState
}

// ListClientDeliveries returns a page of the client's deliveries matching f, in
// creation order (ids are time-ordered), after page.After. It returns ErrNotFound
// when the client does not exist.
func (p *Postgres) ListClientDeliveries(ctx context.Context, clientID string, f DeliveryFilter, page Page) ([]Delivery, error) {
	if err := p.requireClient(ctx, clientID); err != nil {
		return nil, err
	}
	after := page.After
	if after == "" {
		after = uuid.Nil.String()
	} else if uuid.Validate(after) != nil {
		return nil, fmt.Errorf("listing deliveries after %q: not a delivery id", after)
	}
	if f.State != "" && !f.State.Valid() {
		return nil, fmt.Errorf("listing deliveries: unknown state %q", f.State)
	}
	return p.clientDeliveries(ctx, clientID, f, after, false, page.Limit)
}

// DeliveryTarget is what an attempt needs to know about the delivery's receiver,
// read right before the attempt, since the client may have changed it.
type DeliveryTarget struct {
	DeliveryID string
	// Owned reports whether the client still exists and is linked to the sensor.
	// Deliveries about no sensor are always owned (escalations carry their
	// sensor without a notification, and are checked too).
	Owned bool
	// ClientExists is false when the client was deleted.
	ClientExists bool
	WebhookURL   string
	// Secret signs the client's webhooks, decrypted; empty but for webhook
	// deliveries.
	Secret string
	// PreviousSecret is the secret Secret replaced, while it is kept (until
	// PreviousSecretUntil): webhooks are signed with both meanwhile. Empty when
	// there is none, and but for webhook deliveries.
	PreviousSecret      string
	PreviousSecretUntil time.Time
	// Email is empty when the client has no address any more.
	Email string
	// PushTargetExists reports, for a swrve delivery, whether the client still has
	// the device.
	PushTargetExists bool
	// SensorAddress is the sensor's address now; empty if it was deleted.
	SensorAddress string
	// RateLimit is the client's webhook deliveries per second at most; 0 for
	// none.
	RateLimit int
	// EndpointDisabled reports whether the client's webhook endpoint is
	// disabled: a webhook delivery must not be attempted.
	EndpointDisabled bool
	// Quiet, for a member's push or email (no notification of its own), are
	// the member's quiet hours and MemberTimezone its zone; nil when it has
	// none. QuietCritical reports that the delivery is about a critical
	// message the member has not seen (a sensor's; any for a digest; for an
	// escalation round's email or push, one of the episodes it escalates): it
	// goes at once, quiet hours or not.
	Quiet          *domain.QuietHours
	MemberTimezone string
	QuietCritical  bool
}

// DeliveryTargets reads the current receiver of each of the claimed
// deliveries in one query (their ids and event times: the time picks the
// month partition). Deliveries that do not exist are missing from the map.
func (p *Postgres) DeliveryTargets(ctx context.Context, claimed []Delivery) (map[string]DeliveryTarget, error) {
	ids, ats := make([]string, 0, len(claimed)), make([]*time.Time, 0, len(claimed))
	for i, d := range claimed {
		if uuid.Validate(d.ID) == nil {
			ids, ats = append(ids, d.ID), append(ats, &claimed[i].EventAt)
		}
	}
	return p.deliveryTargets(ctx, ids, ats)
}

// deliveryTargets is DeliveryTargets of valid ids, with their event times (a
// nil time: unknown, every partition is looked in).
func (p *Postgres) deliveryTargets(ctx context.Context, ids []string, ats []*time.Time) (map[string]DeliveryTarget, error) {
	out := make(map[string]DeliveryTarget, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := p.pool.Query(ctx, deliveryTargetsSQL, ids, ats)
	if err != nil {
		return nil, fmt.Errorf("reading delivery targets: %w", err)
	}
	defer rows.Close()
	if err := p.scanTargets(rows, out); err != nil {
		return nil, err
	}
	return out, nil
}

// QueueDeliveryTargets queues in b the read of the targets of webhooks the
// fan-out hands over (created in flight, each of a notification), filling out
// when the batch's results arrive: the fan-out reads them in its own
// transaction's pipelined batch and hands them over with them, so the sender
// need not read them again (one round trip fewer). It reads what a webhook's
// attempt needs, as DeliveryTargets does, straight from the client, link and
// sensor (handedTargetsSQL): a handed-over webhook has no delivery row, and no
// quiet hours or push target to look up.
func (p *Postgres) QueueDeliveryTargets(b *pgx.Batch, handed []Delivery, out map[string]DeliveryTarget) {
	ids, clients, sensors := make([]string, 0, len(handed)), make([]string, 0, len(handed)), make([]string, 0, len(handed))
	for _, d := range handed {
		if uuid.Validate(d.ID) == nil && uuid.Validate(d.ClientID) == nil {
			ids, clients, sensors = append(ids, d.ID), append(clients, d.ClientID), append(sensors, d.SensorID)
		}
	}
	if len(ids) == 0 {
		return
	}
	queueQuery(b, "reading handed-over webhooks' targets", handedTargetsSQL, func(rows pgx.Rows) error {
		return p.scanTargets(rows, out)
	}, ids, clients, sensors)
}

// handedTargetsSQL reads handed-over webhooks' targets in deliveryTargetsSQL's
// columns: $1 their ids, $2 their clients, $3 their sensors.
const handedTargetsSQL = `
		SELECT k.id::text, c.id::text, l.client_id IS NOT NULL, true, coalesce(c.webhook_url, ''),
		       coalesce(c.secret, ''),
		       CASE WHEN c.previous_secret_until IS NOT NULL THEN coalesce(c.previous_secret, '') ELSE '' END,
		       c.previous_secret_until, coalesce(c.email, ''), false, coalesce(s.address, ''),
		       coalesce(c.rate_limit, 0), c.endpoint_disabled_at IS NOT NULL, '', '', '', false
		FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS k (id, client_id, sensor_id)
		JOIN clients c ON c.id = k.client_id
		LEFT JOIN client_sensors l ON l.client_id = k.client_id AND l.sensor_id = k.sensor_id
		LEFT JOIN sensors s ON s.id = k.sensor_id`

// scanTargets reads deliveryTargetsSQL's rows into out, by delivery id, with
// their secrets decrypted.
func (p *Postgres) scanTargets(rows pgx.Rows, out map[string]DeliveryTarget) error {
	for rows.Next() {
		var (
			t        DeliveryTarget
			clientID string
			until    *time.Time
			quiet    domain.QuietHours
		)
		if err := rows.Scan(&t.DeliveryID, &clientID, &t.Owned, &t.ClientExists, &t.WebhookURL, &t.Secret, &t.PreviousSecret,
			&until, &t.Email, &t.PushTargetExists, &t.SensorAddress, &t.RateLimit, &t.EndpointDisabled,
			&quiet.From, &quiet.To, &t.MemberTimezone, &t.QuietCritical); err != nil {
			return fmt.Errorf("reading delivery targets: %w", err)
		}
		if quiet.From != "" {
			t.Quiet = &quiet
		}
		if err := p.openSecrets(clientID, &t); err != nil {
			return fmt.Errorf("reading delivery targets: %w", err)
		}
		if until != nil && t.PreviousSecret != "" {
			t.PreviousSecretUntil = until.UTC()
		}
		out[t.DeliveryID] = t
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading delivery targets: %w", err)
	}
	return nil
}

// deliveryTargetsSQL reads deliveries' targets: $1 their ids, $2 their event
// times (a NULL: unknown, every partition is looked in).
const deliveryTargetsSQL = `
		SELECT d.id::text, coalesce(c.id::text, ''),
		       (d.notification_id IS NULL AND d.sensor_id IS NULL) OR (c.id IS NOT NULL AND l.client_id IS NOT NULL),
		       c.id IS NOT NULL, coalesce(c.webhook_url, ''),
		       CASE WHEN d.channel = 'webhook' THEN coalesce(c.secret, '') ELSE '' END,
		       CASE WHEN d.channel = 'webhook' AND c.previous_secret_until IS NOT NULL
		            THEN coalesce(c.previous_secret, '') ELSE '' END,
		       c.previous_secret_until, coalesce(c.email, ''),
		       EXISTS (SELECT 1 FROM push_targets t
		               WHERE t.client_id = d.client_id AND t.platform || ':' || t.push_key = d.target),
		       coalesce(s.address, ''), coalesce(c.rate_limit, 0), c.endpoint_disabled_at IS NOT NULL,
		       coalesce(q.quiet_from, ''), coalesce(q.quiet_to, ''), coalesce(q.timezone, ''),
		       q.id IS NOT NULL AND CASE
		           WHEN d.sensor_id IS NOT NULL THEN EXISTS (
		               SELECT 1 FROM inbox_messages x
		               WHERE x.member_id = q.id AND ` + inbox.EpisodeKey + ` = d.sensor_id AND ` + inbox.EpisodeUnseen + `
		                 AND x.severity = 'critical')
		           WHEN d.event_type = 'digest' THEN EXISTS (
		               SELECT 1 FROM inbox_messages x
		               WHERE x.member_id = q.id AND ` + inbox.EpisodeUnseen + ` AND x.severity = 'critical')
		           -- An escalation round's email or push (about no one sensor):
		           -- the episodes it escalates, first_seq in (from_seq, to_seq].
		           WHEN d.event_type = 'unseen' THEN EXISTS (
		               SELECT 1 FROM member_emails me
		               JOIN escalation_episodes e ON e.member_id = q.id AND e.first_seq > me.from_seq
		                    AND e.first_seq <= me.to_seq AND e.critical_at IS NOT NULL
		               JOIN inbox_messages x ON x.member_id = q.id AND ` + inbox.EpisodeKey + ` = e.key AND x.seq >= e.first_seq
		               WHERE me.delivery_id = d.id AND me.event_at = d.event_at AND ` + inbox.EpisodeUnseen + `
		                 AND x.severity = 'critical')
		           -- An incident reminder's email or push: the reminder it names.
		           WHEN d.event_type = 'incident_reminder' THEN EXISTS (
		               SELECT 1 FROM member_emails me
		               JOIN inbox_messages x ON x.member_id = q.id AND x.seq > me.from_seq AND x.seq <= me.to_seq
		               WHERE me.delivery_id = d.id AND me.event_at = d.event_at AND x.severity = 'critical')
		           ELSE false END
		FROM unnest($1::uuid[], $2::timestamptz[]) AS k (id, at)
		JOIN (
			SELECT id, notification_id, client_id, sensor_id, channel, target, event_type, event_at
			FROM deliveries
			UNION ALL
			-- Handed-over webhooks in flight (migration 00240).
			SELECT id, notification_id, client_id, sensor_id, 'webhook', '', event_type, event_at
			FROM webhooks_in_flight
		) d ON d.id = k.id AND (k.at IS NULL OR d.event_at = k.at)
		LEFT JOIN clients c ON c.id = d.client_id
		LEFT JOIN client_sensors l ON l.client_id = d.client_id AND l.sensor_id = d.sensor_id
		LEFT JOIN sensors s ON s.id = d.sensor_id
		-- A member's email (target member:<id>) or push (a device of a member
		-- of the client) with quiet hours: escalations and notification emails,
		-- which have no notification of their own.
		-- The cast is inside CASE: SQL does not order the conditions of a
		-- WHERE, and a push's target is no member id.
		LEFT JOIN LATERAL (
			SELECT mm.id, mm.quiet_from, mm.quiet_to, mm.timezone FROM members mm
			WHERE mm.quiet_from IS NOT NULL AND mm.id = CASE
			    WHEN d.notification_id IS NULL AND d.channel = 'email' AND d.target LIKE 'member:%'
			    THEN substr(d.target, length('member:') + 1)::uuid END
			UNION ALL
			SELECT mm.id, mm.quiet_from, mm.quiet_to, mm.timezone
			FROM members mm JOIN member_push_targets t ON t.member_id = mm.id
			WHERE d.notification_id IS NULL AND d.channel = 'swrve' AND mm.client_id = d.client_id
			  AND mm.quiet_from IS NOT NULL
			  AND t.platform = split_part(d.target, ':', 1) AND t.push_key = substr(d.target, strpos(d.target, ':') + 1)
			LIMIT 1
		) q ON true`

// openSecrets decrypts the target's secrets in place.
func (p *Postgres) openSecrets(clientID string, t *DeliveryTarget) error {
	if t.Secret == "" && t.PreviousSecret == "" {
		return nil
	}
	if p.secrets == nil {
		return secretbox.ErrNoBox
	}
	var err error
	if t.Secret, err = p.secrets.Open(clientID, t.Secret); err != nil {
		return err
	}
	t.PreviousSecret, err = p.secrets.Open(clientID, t.PreviousSecret)
	return err
}

// DeliveryTarget reads one delivery's current receiver, or returns ErrNotFound.
func (p *Postgres) DeliveryTarget(ctx context.Context, deliveryID string) (DeliveryTarget, error) {
	if uuid.Validate(deliveryID) != nil {
		return DeliveryTarget{}, fmt.Errorf("reading target of delivery %s: %w", deliveryID, ErrNotFound)
	}
	targets, err := p.deliveryTargets(ctx, []string{deliveryID}, []*time.Time{nil})
	if err != nil {
		return DeliveryTarget{}, err
	}
	t, ok := targets[strings.ToLower(deliveryID)]
	if !ok {
		return DeliveryTarget{}, fmt.Errorf("reading target of delivery %s: %w", deliveryID, ErrNotFound)
	}
	return t, nil
}

// OutboxStats describes the outbox's backlog.
type OutboxStats struct {
	// Depth counts the deliveries that may still be sent, by state (SCHEDULED,
	// PENDING, RETRY, IN_FLIGHT); every one of those states has an entry.
	Depth map[DeliveryState]int64
	// OldestDue is the NextAttemptAt of the longest-waiting due delivery; zero when
	// nothing is due.
	OldestDue time.Time
}

// OutboxStats counts the open deliveries and finds the oldest due one, as of now.
// It reads only open deliveries, so its cost follows the backlog, not the history.
func (p *Postgres) OutboxStats(ctx context.Context, now time.Time) (OutboxStats, error) {
	stats := OutboxStats{Depth: map[DeliveryState]int64{
		DeliveryScheduled: 0, DeliveryPending: 0, DeliveryRetry: 0, DeliveryInFlight: 0,
	}}
	rows, err := p.pool.Query(ctx, `
		SELECT state, count(*), min(next_attempt_at) FILTER (WHERE state <> 'IN_FLIGHT' AND next_attempt_at <= $1)
		FROM deliveries
		WHERE state IN ('SCHEDULED', 'PENDING', 'RETRY', 'IN_FLIGHT')
		GROUP BY state
		UNION ALL
		-- Handed-over webhooks on their first attempt (migration 00240).
		SELECT 'IN_FLIGHT', count(*), NULL FROM webhooks_in_flight`, now)
	if err != nil {
		return OutboxStats{}, fmt.Errorf("reading outbox stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			state  DeliveryState
			count  int64
			oldest *time.Time
		)
		if err := rows.Scan(&state, &count, &oldest); err != nil {
			return OutboxStats{}, fmt.Errorf("reading outbox stats: %w", err)
		}
		stats.Depth[state] += count
		if oldest != nil && (stats.OldestDue.IsZero() || oldest.Before(stats.OldestDue)) {
			stats.OldestDue = *oldest
		}
	}
	if err := rows.Err(); err != nil {
		return OutboxStats{}, fmt.Errorf("reading outbox stats: %w", err)
	}
	return stats, nil
}
