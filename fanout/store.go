package fanout

// The fan-out's statements: who gets what. For every client linked to an
// event's sensor (or site), one notification and a delivery per channel it
// has, the superseding of older undelivered states, and a message in the inbox
// of every member its routing lets through, in one transaction.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/storage"
)

// PostgresStore is the fan-out's NotificationStore on Postgres: it owns the
// fan-out's statements and counts, per process, the deliveries it put into
// each month partition (see NotificationsCreated.AnalyzeDue). Make one per
// process and share it.
type PostgresStore struct {
	pg       *storage.Postgres
	pool     *pgxpool.Pool
	analyzer storage.OutboxGrowth
}

// NewPostgresStore returns the fan-out's store over pg's pool.
func NewPostgresStore(pg *storage.Postgres) *PostgresStore {
	return &PostgresStore{pg: pg, pool: pg.Pool()}
}

// AnalyzeOutboxMonth refreshes the planner statistics of the month's outbox
// partitions (storage.Postgres.AnalyzeOutboxMonth).
func (s *PostgresStore) AnalyzeOutboxMonth(ctx context.Context, month string) error {
	return s.pg.AnalyzeOutboxMonth(ctx, month)
}

// CreateInboxPartitions makes sure inbox_messages has its month partitions
// from the month of from to months later, and returns their names
// (inbox.PostgresStore.CreateInboxPartitions).
func (s *PostgresStore) CreateInboxPartitions(ctx context.Context, from time.Time, months int) ([]string, error) {
	return inbox.NewPostgresStore(s.pg).CreateInboxPartitions(ctx, from, months)
}

// NotificationsCreated counts what PostgresStore.CreateNotifications did.
type NotificationsCreated struct {
	// Notifications is the number of new notification rows (replays add none).
	Notifications int
	// Deliveries counts new deliveries by channel.
	Deliveries map[storage.Channel]int
	// Superseded counts older undelivered state_changed deliveries made moot, by
	// channel.
	Superseded map[storage.Channel]int
	// InboxMessages is the number of messages put in members' inboxes: one per
	// new notification and member of its client.
	InboxMessages int
	// Filtered counts the (event, linked client) pairs left out because the
	// client is not subscribed to the event's type (replays count again).
	Filtered int
	// AnalyzeDue lists the months ("200601") whose outbox partitions this
	// process has filled enough to analyze now (AnalyzeOutboxMonth): at
	// OutboxAnalyzeRows of its deliveries, then each time they doubled. The
	// caller runs it, off the path of its next batch.
	AnalyzeDue []string
	// Claimed are the webhook deliveries created claimed (see Claim), in event
	// order: IN_FLIGHT on their first attempt, for the caller to send.
	Claimed []storage.Delivery
	// ClaimedTargets are the Claimed deliveries' targets by delivery id, read
	// in the transaction as storage.Postgres.DeliveryTargets reads them.
	ClaimedTargets map[string]storage.DeliveryTarget
	// SharedPending says that shared inbox messages (this batch's, or ones a
	// crash left) wait for their members' own copies after the commit: the
	// caller has them written (CopySharedInboxMessages), off the streams'
	// path.
	SharedPending bool
}

// Claim asks CreateNotificationsClaiming to create up to Max of the batch's
// webhook (and, with Email, email) deliveries claimed already, as a
// retrier's claim would leave them (IN_FLIGHT, Attempts 1, leased until
// LeasedUntil), for a sender in the same process to start once the
// transaction commits: no claim statement, no NOTIFY round trip, no poll. A
// claimed webhook gets no delivery row, only a row in flight; a claimed email
// is a delivery row IN_FLIGHT. Only a delivery a claim could take at once
// qualifies: a webhook to an endpoint not disabled or an email, the only one
// of its (client, sensor, channel, target) in the batch, with no open older
// one. If the process dies before the attempts are recorded, the leases run
// out and any retrier's sweep puts the deliveries back to PENDING, as for a
// claim. The zero Claim claims nothing.
type Claim struct {
	// Max is the most deliveries to create claimed.
	Max int
	// LeasedUntil is the end of their lease.
	LeasedUntil time.Time
	// Email lets emails be claimed too: their sender is the same process's.
	Email bool
	// Committed, when not nil, is called with the claimed deliveries and
	// their targets as soon as the transaction has committed, before
	// anything CreateNotificationsClaiming does after it (the members'
	// copies of shared messages), and whether or not that fails; it is not
	// called when the transaction did not commit.
	Committed func(claimed []storage.Delivery, targets map[string]storage.DeliveryTarget)
}

// Delivery is one channel's job of delivering one notification, with the event it

// CreateNotifications fans a batch of events out in one transaction: for every
// client linked to an event's sensor, one notification and one PENDING delivery
// per channel the client has (webhook always, email when it has an address, swrve
// per push target). It is idempotent: an (event, client) notified before creates
// nothing. For every new state_changed delivery, the same (client, sensor,
// channel, target)'s older state_changed deliveries that are not sent or being
// sent (SCHEDULED, PENDING, RETRY) become SUPERSEDED; an IN_FLIGHT one is
// superseded by FinishDeliveries if its attempt does not succeed. Events
// repeated within the batch count once. Each new notification also puts one
// message in the inbox of every member of its client, in the same transaction
// and one more statement (insertEventMessages), so a replayed event adds no
// message either. When it created deliveries, it notifies OutboxChannel in the
// same transaction (one statement more), so listening retriers hear of them on
// commit. It names the month partitions this process has put
// OutboxAnalyzeRows deliveries into, and again each time they doubled
// (NotificationsCreated.AnalyzeDue), for the caller to analyze, so the
// statements that read a burst do not wait for autovacuum to learn of it.
// Then, for callers with no copy loop of their own (tools, tests), it writes
// the members' copies of the shared inbox messages at once
// (CopySharedInboxMessages); the fan-out itself calls
// CreateNotificationsClaiming and writes them InboxCopyDelay later.
func (s *PostgresStore) CreateNotifications(ctx context.Context, events []storage.NotificationInput) (NotificationsCreated, error) {
	created, err := s.CreateNotificationsClaiming(ctx, events, Claim{})
	if err != nil || !created.SharedPending {
		return created, err
	}
	if _, err := s.CopySharedInboxMessages(ctx); err != nil {
		return created, fmt.Errorf("creating notifications for %d events: %w", len(events), err)
	}
	created.SharedPending = false
	return created, nil
}

// CreateNotificationsClaiming is CreateNotifications that also creates up to
// claim.Max webhook deliveries claimed (see Claim), returned in
// NotificationsCreated.Claimed, and leaves the members' copies of shared inbox
// messages to the caller (NotificationsCreated.SharedPending). Claimed
// deliveries are not counted in the NOTIFY to the retriers: nobody else is to
// claim them.
func (s *PostgresStore) CreateNotificationsClaiming(ctx context.Context, events []storage.NotificationInput, claim Claim) (NotificationsCreated, error) {
	created := NotificationsCreated{Deliveries: map[storage.Channel]int{}, Superseded: map[storage.Channel]int{}}
	if len(events) == 0 {
		return created, nil
	}
	fb := newFanoutBatch(events)
	months := map[string]int{} // new deliveries per month partition
	if err := s.writeFanout(ctx, fb, claim, &created, months); err != nil {
		return NotificationsCreated{}, fmt.Errorf("creating notifications for %d events: %w", len(fb.unique), err)
	}
	created.AnalyzeDue = s.analyzer.Note(months)
	return created, nil
}

// fanoutBatch is a fan-out batch's events, each once, as the arrays of
// createNotificationsSQL.
type fanoutBatch struct {
	unique                               []storage.NotificationInput
	eventIndex                           map[string]int // an event id's place in unique
	ids, types, sensors, audience, sites []string
	data, previous                       []*int16
	times                                []time.Time
	lostSince                            []*time.Time
}

func newFanoutBatch(events []storage.NotificationInput) fanoutBatch {
	fb := fanoutBatch{eventIndex: make(map[string]int, len(events))}
	for _, e := range events {
		if _, seen := fb.eventIndex[e.EventID]; seen {
			continue
		}
		fb.eventIndex[e.EventID] = len(fb.unique)
		fb.unique = append(fb.unique, e)
		fb.ids, fb.types, fb.sensors = append(fb.ids, e.EventID), append(fb.types, e.Type), append(fb.sensors, e.SensorID)
		fb.data, fb.previous = append(fb.data, int16Ptr(e.Data)), append(fb.previous, int16Ptr(e.Previous))
		fb.times, fb.audience, fb.sites = append(fb.times, e.At), append(fb.audience, eventAudience(e)), append(fb.sites, e.Site)
		fb.lostSince = append(fb.lostSince, e.LostSince)
	}
	return fb
}

// out in event order.
type supersedeKey struct{ client, sensor, channel, target string }

// fanoutRows is what createNotificationsSQL created: for each key, its newest
// state_changed (whose older undelivered ones it supersedes), and the new
// notifications, for their inbox messages.
type fanoutRows struct {
	newest    map[supersedeKey]time.Time
	newNotifs []storage.NewNotification
	// claimed are the webhooks created claimed, handed over in flight.
	claimed []storage.Delivery
	// pending counts the new deliveries others may claim, by channel: those
	// the NOTIFY tells the retriers of.
	pending map[storage.Channel]int
}

// writeFanout writes the batch in one transaction of three round trips: BEGIN
// with the outbox insert (which locks the clients, takes their seqs and writes
// the notifications with them); then, pipelined, the site annotations, the
// shared inbox messages and their members' seqs, the other inbox messages, the
// retriers' wake-up, the superseding and the handed-over webhooks' targets;
// then COMMIT. When members got
// messages, their NOTIFY (built from the rows read) takes one more round trip
// before the COMMIT. The members' copies of the shared messages are left to
// the caller (created.SharedPending, CopySharedInboxMessages).
func (s *PostgresStore) writeFanout(ctx context.Context, fb fanoutBatch, claim Claim, created *NotificationsCreated, months map[string]int) (err error) {
	var r fanoutRows
	var leasedUntil *time.Time
	if claim.Max > 0 {
		leasedUntil = &claim.LeasedUntil
	}
	first := &pgx.Batch{}
	first.BeginTx(pgx.TxOptions{})
	first.Queue(createNotificationsSQL, fb.ids, fb.types, fb.sensors, fb.data, fb.previous, fb.times,
		fb.audience, fb.sites, fb.lostSince, max(claim.Max, 0), leasedUntil, claim.Email).Query(func(rows pgx.Rows) error {
		var scanErr error
		r, scanErr = fb.scanCreated(rows, created, months)
		return scanErr
	})
	br := s.pool.SendBatch(ctx, first)
	tx := br.Tx()
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx)) // closed already when BEGIN failed
		}
	}()
	if err := br.Close(); err != nil {
		return fmt.Errorf("inserting notifications: %w", err)
	}
	var (
		shared, added []inbox.Added
		pending       bool
	)
	then := &pgx.Batch{}
	queueSiteAnnotations(then, fb.unique, r.newNotifs)
	queueSharedMessages(then, fb.unique, r.newNotifs, &shared)
	queueEventMessages(then, fb.unique, r.newNotifs, &added)
	inbox.QueueSharedPending(then, &pending)
	queueOutboxNotify(then, r.pending)
	queueSupersede(then, r.newest, created.Superseded)
	var targets map[string]storage.DeliveryTarget
	if len(r.claimed) > 0 {
		targets = make(map[string]storage.DeliveryTarget, len(r.claimed))
		s.pg.QueueDeliveryTargets(then, r.claimed, targets)
	}
	if then.Len() > 0 {
		if err := tx.SendBatch(ctx, then).Close(); err != nil {
			return err
		}
	}
	created.InboxMessages = len(shared) + len(added)
	if err := inbox.Notify(ctx, tx, append(shared, added...)); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	for i := range r.claimed {
		r.claimed[i].LeasedUntil = claim.LeasedUntil // the sender gives back what it cannot send in time
	}
	created.Claimed, created.ClaimedTargets = r.claimed, targets
	// The claimed deliveries go to their sender now, not after what follows.
	if claim.Committed != nil {
		claim.Committed(created.Claimed, created.ClaimedTargets)
	}
	created.SharedPending = pending
	return nil
}

// CopySharedInboxMessages writes every member's own copy of the shared inbox
// messages not yet copied (inbox.MaterializeShared), in one transaction, and
// says how many it wrote. Readers of an inbox write a member's first
// (inbox.QueueMaterialize), so nothing waits for it.
func (s *PostgresStore) CopySharedInboxMessages(ctx context.Context) (int, error) {
	return inbox.MaterializeShared(ctx, s.pool)
}

// scanCreated reads createNotificationsSQL's rows into created (counts) and
// months (new deliveries per month, handed over or not), and returns what the rest of
// the transaction needs of them.
func (fb fanoutBatch) scanCreated(rows pgx.Rows, created *NotificationsCreated, months map[string]int) (fanoutRows, error) {
	r := fanoutRows{newest: map[supersedeKey]time.Time{}, pending: map[storage.Channel]int{}}
	for rows.Next() {
		var (
			k                       supersedeKey
			eventType               string
			at                      time.Time
			count, filtered         int
			notificationID, eventID string
			deliveryID, state       string
			client                  *string
			seq                     int64
		)
		if err := rows.Scan(&count, &filtered, &client, &k.sensor, &eventType, &k.channel, &k.target, &at,
			&notificationID, &eventID, &deliveryID, &state, &seq); err != nil {
			return fanoutRows{}, err
		}
		created.Notifications, created.Filtered = count, filtered
		if client == nil {
			continue // the row of counts alone: nothing was created
		}
		k.client = *client
		created.Deliveries[storage.Channel(k.channel)]++
		// Counted whether it has a delivery row or not: a webhook handed over
		// has none, but its notification, and its attempt, fill the month's
		// partitions all the same, and the plans that probe them need to know.
		months[at.UTC().Format("200601")]++
		switch storage.DeliveryState(state) {
		case storage.DeliveryInFlight: // claimed: a webhook in webhooks_in_flight, an email a row
			r.claimed = append(r.claimed, fb.claimedDelivery(deliveryID, notificationID, eventID, k, at, seq))
		case storage.DeliveryPending:
			r.pending[storage.Channel(k.channel)]++
		}
		if eventType == string(event.StateChanged) && at.After(r.newest[k]) {
			r.newest[k] = at
		}
		// Every notification has exactly one webhook delivery.
		if storage.Channel(k.channel) == storage.ChannelWebhook {
			r.newNotifs = append(r.newNotifs, storage.NewNotification{ID: notificationID, ClientID: k.client, Event: fb.eventIndex[eventID]})
		}
	}
	return r, rows.Err()
}

// claimedDelivery is a delivery createNotificationsSQL created claimed, as a
// claim returns it, with the seq its notification was written with, but for its
// NextAttemptAt (the event's time: due from then, it sorts as the claim
// sorts) and its LeasedUntil (set after the commit).
func (fb fanoutBatch) claimedDelivery(id, notificationID, eventID string, k supersedeKey, at time.Time, seq int64) storage.Delivery {
	e := fb.unique[fb.eventIndex[eventID]]
	return storage.Delivery{ID: id, NotificationID: notificationID, ClientID: k.client, SensorID: k.sensor, Seq: seq,
		Channel: storage.Channel(k.channel), Target: k.target, State: storage.DeliveryInFlight, Attempts: 1,
		NextAttemptAt: at, EventID: eventID, EventType: e.Type, Data: e.Data, Previous: e.Previous, EventAt: at,
		Site: e.Site, Sensors: e.Sensors, LostSince: e.LostSince}
}

// queueSupersede queues, for each key's newest new state_changed, the
// superseding of the key's older state_changed deliveries that are not sent or
// being sent (SCHEDULED, PENDING, RETRY), counting them by channel in
// superseded.
func queueSupersede(b *pgx.Batch, newest map[supersedeKey]time.Time, superseded map[storage.Channel]int) {
	if len(newest) == 0 {
		return
	}
	var clients, sensorIDs, channels, targets []string
	var ats []time.Time
	for k, at := range newest {
		clients, sensorIDs = append(clients, k.client), append(sensorIDs, k.sensor)
		channels, targets, ats = append(channels, k.channel), append(targets, k.target), append(ats, at)
	}
	storage.QueueQuery(b, "superseding older deliveries", supersedeSQL, func(rows pgx.Rows) error {
		channels, err := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, ch := range channels {
			superseded[storage.Channel(ch)]++
		}
		return err
	}, clients, sensorIDs, channels, targets, ats, storage.SupersededError)
}

// supersedeSQL is queueSupersede's statement: $1-$5 the keys and their newest

// int16Ptr is v as the int2 of a statement's parameter; nil stays nil.
func int16Ptr(v *int) *int16 {
	if v == nil {
		return nil
	}
	i := int16(*v)
	return &i
}
