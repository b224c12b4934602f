package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/internal/pgutil"
)

// PushRequest is what a standalone push (POST /push, POST /v1/pushes) asks for:
// a message for one device, now or when a cron window opens. Its delivery is a
// swrve delivery of no sensor event; see migrations/postgres/00005_pushes.sql.
type PushRequest struct {
	Platform Platform
	// MessagePrototypeKey names the message prototype, which the Swrve sender maps
	// to the campaign's push key for the platform.
	MessagePrototypeKey string
	// PushKey is the device's push key (Swrve's "user").
	PushKey string
	Message string
	// CronExpression is empty for an immediate push. A push with one is
	// SCHEDULED until WindowAt.
	CronExpression string
	// ReceivedAt is when the API received the push.
	ReceivedAt time.Time
	// WindowAt is when the push is first due: the expression's next activation
	// after ReceivedAt for a scheduled push, ReceivedAt for an immediate one.
	WindowAt time.Time
}

// Scheduled reports whether the push waits for a cron window.
func (p PushRequest) Scheduled() bool { return p.CronExpression != "" }

// Push is a stored standalone push: its request and its delivery, whose ID is
// the push's id.
type Push struct {
	Delivery
	PushRequest
}

// pushColumns are selected with deliveryColumns by GetPush, in scanPush's order.
const pushColumns = `p.platform, p.message_prototype_key, p.push_key, p.message, p.cron_expression,
	p.window_at, p.received_at`

// pushTarget is the delivery target of a push to that device, as the outbox
// spells swrve targets.
func pushTarget(platform Platform, pushKey string) string {
	return string(platform) + ":" + pushKey
}

// validate reports the first field of p the pushes table would refuse.
func (p PushRequest) validate() error {
	switch {
	case p.Platform != PlatformIOS && p.Platform != PlatformAndroid:
		return fmt.Errorf("platform %q is neither %s nor %s", p.Platform, PlatformIOS, PlatformAndroid)
	case p.MessagePrototypeKey == "":
		return errors.New("the message prototype key is empty")
	case p.PushKey == "":
		return errors.New("the push key is empty")
	case p.Message == "":
		return errors.New("the message is empty")
	case p.ReceivedAt.IsZero():
		return errors.New("ReceivedAt is zero")
	case p.WindowAt.IsZero():
		return errors.New("WindowAt is zero")
	}
	return nil
}

// CreatePush stores a push and its delivery in one statement, so that once it
// returns the push is durable and a retrier will send it: PENDING, due at
// WindowAt (= ReceivedAt), for an immediate push; SCHEDULED until WindowAt for
// a push with a cron expression. The delivery's event time is ReceivedAt.
func (p *Postgres) CreatePush(ctx context.Context, req PushRequest) (Push, error) {
	if err := req.validate(); err != nil {
		return Push{}, fmt.Errorf("creating push: %w", err)
	}
	state := DeliveryPending
	if req.Scheduled() {
		state = DeliveryScheduled
	}
	push := Push{PushRequest: req}
	push.Channel, push.Target, push.State = ChannelSwrve, pushTarget(req.Platform, req.PushKey), state
	push.NextAttemptAt, push.EventAt = req.WindowAt, req.ReceivedAt
	// One statement is one transaction: the delivery and the push exist together
	// or not at all.
	err := p.pool.QueryRow(ctx, `
		WITH d AS (
			INSERT INTO deliveries (id, channel, target, state, next_attempt_at, event_at)
			VALUES (lockstream_uuid_v7(), 'swrve', $1, $2, $3, $4)
			RETURNING id, created_at, updated_at
		), p AS (
			INSERT INTO pushes (delivery_id, platform, message_prototype_key, push_key, message,
			                    cron_expression, window_at, received_at)
			SELECT d.id, $5, $6, $7, $8, $9, $3, $4 FROM d
		)
		SELECT id::text, created_at, updated_at FROM d`,
		push.Target, string(state), req.WindowAt, req.ReceivedAt,
		string(req.Platform), req.MessagePrototypeKey, req.PushKey, req.Message, req.CronExpression,
	).Scan(&push.ID, &push.CreatedAt, &push.UpdatedAt)
	if err != nil {
		return Push{}, fmt.Errorf("creating push: %w", pgutil.MapError(err))
	}
	return push, nil
}

// extraScan is a row whose Scan fills dest and then extra, so that a query
// selecting deliveryColumns and more can still be read by scanDelivery.
type extraScan struct {
	row   pgx.Row
	extra []any
}

func (e extraScan) Scan(dest ...any) error {
	return e.row.Scan(append(dest, e.extra...)...)
}

func scanPush(row pgx.Row) (Push, error) {
	var (
		push     Push
		platform string
	)
	d, err := scanDelivery(extraScan{row: row, extra: []any{&platform, &push.MessagePrototypeKey, &push.PushKey,
		&push.Message, &push.CronExpression, &push.WindowAt, &push.ReceivedAt}})
	if err != nil {
		return Push{}, err
	}
	push.Delivery, push.Platform = d, Platform(platform)
	return push, nil
}

// GetPush returns the push with its delivery's current state, or ErrNotFound
// (also for the id of a delivery that is not a standalone push). Its attempts
// are in ClickHouse: ClickHouse.DeliveryAttempts(ctx, push.ID).
func (p *Postgres) GetPush(ctx context.Context, id string) (Push, error) {
	if uuid.Validate(id) != nil {
		return Push{}, fmt.Errorf("getting push %s: %w", id, ErrNotFound)
	}
	push, err := scanPush(p.pool.QueryRow(ctx, `SELECT `+deliveryColumns+`, `+pushColumns+`
		FROM deliveries d JOIN pushes p ON p.delivery_id = d.id
		LEFT JOIN notifications n ON n.id = d.notification_id AND n.event_at = d.event_at
		WHERE d.id = $1`, id))
	if err != nil {
		return Push{}, fmt.Errorf("getting push %s: %w", id, pgutil.MapError(err))
	}
	return push, nil
}

// PushRequests returns the requests of the standalone pushes and of the
// escalation pushes among the deliveries, by delivery id, in one query; the
// retrier reads them for the deliveries it claimed. Ids of other deliveries
// are missing from the map.
func (p *Postgres) PushRequests(ctx context.Context, deliveryIDs []string) (map[string]PushRequest, error) {
	out := make(map[string]PushRequest, len(deliveryIDs))
	ids := pgutil.ValidUUIDs(deliveryIDs)
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := p.pool.Query(ctx, `
		SELECT p.delivery_id::text, `+pushColumns+`
		FROM pushes p WHERE p.delivery_id = ANY ($1::uuid[])
		UNION ALL`+inbox.PushRequests, ids, inbox.UnseenPushPrototype)
	if err != nil {
		return nil, fmt.Errorf("reading push requests: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id       string
			req      PushRequest
			platform string
		)
		if err := rows.Scan(&id, &platform, &req.MessagePrototypeKey, &req.PushKey, &req.Message,
			&req.CronExpression, &req.WindowAt, &req.ReceivedAt); err != nil {
			return nil, fmt.Errorf("reading push requests: %w", err)
		}
		req.Platform = Platform(platform)
		out[id] = req
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading push requests: %w", err)
	}
	return out, nil
}
