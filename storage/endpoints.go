package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Delivery controls (docs/DESIGN.md "Delivery controls"): the health of clients'
// webhook endpoints, their auto-disable and enable, the owner's email about it,
// and the recovery of failed deliveries.

// Endpoint event types (endpoint_events.type).
const (
	EndpointDisabledEvent  = "endpoint_disabled"
	EndpointEnabledEvent   = "endpoint_enabled"
	EndpointFailingEvent   = "endpoint_failing"
	EndpointRecoveredEvent = "endpoint_recovered"
)

// DisabledEndpoint is an endpoint DisableFailingEndpoints disabled.
type DisabledEndpoint struct {
	ClientID     string
	FailingSince time.Time
	Failures     int
}

// EndpointSweep is what one DisableFailingEndpoints did.
type EndpointSweep struct {
	Disabled []DisabledEndpoint
	// Paused counts the webhook deliveries made PAUSED (of the endpoints just
	// disabled, and any left open of those disabled before).
	Paused int
	// Resumed counts PAUSED deliveries of enabled endpoints made PENDING again
	// (one a fan-out created while the endpoint was being enabled).
	Resumed int
}

// DisableFailingEndpoints disables, as of now, every enabled webhook endpoint
// whose attempts have all failed since at least failingFor ago, with at least
// minFailures failures, in one statement: each gets endpoint_disabled_at, an
// endpoint_disabled event (whose email MailEndpointNotices sends, and which
// PublishEndpointNotices puts on the client's feed), notice state 'disabled',
// and its open
// webhook deliveries (SCHEDULED, PENDING, RETRY) become PAUSED. The same
// statement repairs strays: open webhook deliveries of endpoints disabled before
// are paused, and PAUSED ones of enabled endpoints resumed. Concurrent callers
// disable each endpoint once.
func (p *Postgres) DisableFailingEndpoints(ctx context.Context, now time.Time, failingFor time.Duration, minFailures int) (EndpointSweep, error) {
	rows, err := p.pool.Query(ctx, `
		WITH dis AS (
			UPDATE clients SET endpoint_disabled_at = $1, endpoint_notice = 'disabled', updated_at = now()
			WHERE endpoint_disabled_at IS NULL AND webhook_failing_since IS NOT NULL
			  AND webhook_failing_since <= $1::timestamptz - $2::interval AND webhook_failures >= $3
			RETURNING id, webhook_failing_since, webhook_failures
		), ev AS (
			INSERT INTO endpoint_events (client_id, type, detail, at)
			SELECT id, 'endpoint_disabled',
			       format('every webhook attempt failed since %s (%s failures)', webhook_failing_since, webhook_failures), $1
			FROM dis
		), paused AS (
			UPDATE deliveries d SET state = 'PAUSED', updated_at = now()
			WHERE d.channel = 'webhook' AND d.state IN ('SCHEDULED', 'PENDING', 'RETRY')
			  AND d.client_id IN (SELECT id FROM dis UNION ALL
			                      SELECT id FROM clients WHERE endpoint_disabled_at IS NOT NULL)
			RETURNING 1
		), resumed AS (
			UPDATE deliveries d SET state = 'PENDING', next_attempt_at = $1, resumed_at = $1, updated_at = now()
			FROM clients c
			WHERE d.state = 'PAUSED' AND c.id = d.client_id AND c.endpoint_disabled_at IS NULL
			  AND d.client_id NOT IN (SELECT id FROM dis)
			RETURNING 1
		)
		SELECT coalesce(dis.id::text, ''), coalesce(dis.webhook_failing_since, 'epoch'), coalesce(dis.webhook_failures, 0),
		       (SELECT count(*) FROM paused), (SELECT count(*) FROM resumed)
		FROM (SELECT 1) AS one LEFT JOIN dis ON true`, now, failingFor, minFailures)
	if err != nil {
		return EndpointSweep{}, fmt.Errorf("disabling failing endpoints: %w", err)
	}
	var sweep EndpointSweep
	for rows.Next() {
		var d DisabledEndpoint
		if err := rows.Scan(&d.ClientID, &d.FailingSince, &d.Failures, &sweep.Paused, &sweep.Resumed); err != nil {
			rows.Close()
			return EndpointSweep{}, fmt.Errorf("disabling failing endpoints: %w", err)
		}
		if d.ClientID != "" {
			sweep.Disabled = append(sweep.Disabled, d)
		}
	}
	if err := rows.Err(); err != nil {
		return EndpointSweep{}, fmt.Errorf("disabling failing endpoints: %w", err)
	}
	return sweep, nil
}

// EnableEndpoint enables the client's webhook endpoint (healthy again, failures
// forgotten), records an endpoint_enabled event when it was disabled, and makes
// its PAUSED deliveries PENDING, due in event order (one microsecond apart, so
// claims take them oldest first) and marked resumed (resumed_at), in one
// statement. Resumed deliveries go out one after another in event order
// across the client's sensors: the claim holds one back while an older
// resumed delivery of the same client and channel is open (migration 00200). It returns how many
// deliveries it resumed, or ErrNotFound.
func (p *Postgres) EnableEndpoint(ctx context.Context, clientID string) (int, error) {
	if uuid.Validate(clientID) != nil {
		return 0, fmt.Errorf("enabling the endpoint of client %s: %w", clientID, ErrNotFound)
	}
	var found bool
	var resumed int
	err := p.pool.QueryRow(ctx, `
		WITH old AS (
			SELECT id, endpoint_disabled_at FROM clients WHERE id = $1 FOR UPDATE
		), c AS (
			UPDATE clients SET endpoint_disabled_at = NULL, webhook_failing_since = NULL, webhook_failures = 0,
			       updated_at = now()
			FROM old WHERE clients.id = old.id
			RETURNING clients.id
		), ev AS (
			INSERT INTO endpoint_events (client_id, type, detail)
			SELECT id, 'endpoint_enabled', 'enabled through the API' FROM old WHERE endpoint_disabled_at IS NOT NULL
		), kept AS (
			SELECT id, event_at, row_number() OVER (ORDER BY event_at, seq) AS rn
			FROM deliveries WHERE client_id = $1 AND state = 'PAUSED'
		), r AS (
			UPDATE deliveries d
			SET state = 'PENDING', next_attempt_at = now() + kept.rn * interval '1 microsecond', resumed_at = now(),
			    updated_at = now()
			FROM kept WHERE d.id = kept.id AND d.event_at = kept.event_at AND d.state = 'PAUSED'
			  AND EXISTS (SELECT 1 FROM old)
			RETURNING 1
		)
		SELECT EXISTS (SELECT 1 FROM c), (SELECT count(*) FROM r)`, clientID).Scan(&found, &resumed)
	if err != nil {
		return 0, fmt.Errorf("enabling the endpoint of client %s: %w", clientID, err)
	}
	if !found {
		return 0, fmt.Errorf("enabling the endpoint of client %s: %w", clientID, ErrNotFound)
	}
	return resumed, nil
}

// EndpointEvent is something that happened to a client's webhook endpoint.
type EndpointEvent struct {
	ID       int64
	ClientID string
	Type     string
	Detail   string
	At       time.Time
	// EmailedAt is when the owner was mailed about it; zero if not (yet).
	EmailedAt  time.Time
	EmailError string
}

// EndpointEvents returns the client's newest endpoint events, newest first, at
// most limit.
func (p *Postgres) EndpointEvents(ctx context.Context, clientID string, limit int) ([]EndpointEvent, error) {
	if uuid.Validate(clientID) != nil {
		return nil, fmt.Errorf("listing endpoint events of client %s: %w", clientID, ErrNotFound)
	}
	rows, err := p.pool.Query(ctx, `
		SELECT id, client_id::text, type, detail, at, coalesce(emailed_at, 'epoch'), email_error
		FROM endpoint_events WHERE client_id = $1 ORDER BY id DESC LIMIT $2`, clientID, limit)
	if err != nil {
		return nil, fmt.Errorf("listing endpoint events of client %s: %w", clientID, err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (EndpointEvent, error) {
		var e EndpointEvent
		err := row.Scan(&e.ID, &e.ClientID, &e.Type, &e.Detail, &e.At, &e.EmailedAt, &e.EmailError)
		if e.EmailedAt.Equal(time.Unix(0, 0)) {
			e.EmailedAt = time.Time{}
		}
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing endpoint events of client %s: %w", clientID, err)
	}
	return events, nil
}

// EndpointNotice is an operational notice (endpoint_failing,
// endpoint_disabled, endpoint_recovered) to mail to the client's owner.
type EndpointNotice struct {
	EventID  int64
	ClientID string
	// Type is the notice's endpoint event type.
	Type       string
	ClientName string
	WebhookURL string
	// Email is empty when the client has no address.
	Email  string
	Detail string
	At     time.Time
}

// NoticeResult is what became of mailing one notice.
type NoticeResult struct {
	// Done: the notice is settled (sent, or will never be: Error says why) and
	// not mailed again; otherwise it is tried again at the next call.
	Done  bool
	Error string
}

// MailEndpointNotices hands up to limit operational notices (endpoint events
// other than endpoint_enabled) not mailed yet
// to send, one at a time, and records each result, in one transaction that
// holds them (FOR UPDATE SKIP LOCKED), so concurrent callers never mail one
// twice. A crash between a send and the commit mails that notice again.
func (p *Postgres) MailEndpointNotices(ctx context.Context, limit int, send func(context.Context, EndpointNotice) NoticeResult) (int, error) {
	mailed := 0
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT e.id, e.client_id::text, e.type, coalesce(c.name, ''), coalesce(c.webhook_url, ''),
			       coalesce(c.email, ''), e.detail, e.at
			FROM endpoint_events e LEFT JOIN clients c ON c.id = e.client_id
			WHERE e.type <> 'endpoint_enabled' AND e.emailed_at IS NULL
			ORDER BY e.id LIMIT $1
			FOR UPDATE OF e SKIP LOCKED`, limit)
		if err != nil {
			return err
		}
		notices, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (EndpointNotice, error) {
			var n EndpointNotice
			err := row.Scan(&n.EventID, &n.ClientID, &n.Type, &n.ClientName, &n.WebhookURL, &n.Email, &n.Detail, &n.At)
			return n, err
		})
		if err != nil {
			return err
		}
		for _, n := range notices {
			res := send(ctx, n)
			if _, err := tx.Exec(ctx, `
				UPDATE endpoint_events SET emailed_at = CASE WHEN $2 THEN now() END, email_error = $3
				WHERE id = $1`, n.EventID, res.Done, res.Error); err != nil {
				return err
			}
			if res.Done && res.Error == "" {
				mailed++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("mailing endpoint notices: %w", err)
	}
	return mailed, nil
}

// RecoverResult is what RecoverDeliveries did.
type RecoverResult struct {
	// Recovered counts the deliveries made PENDING again.
	Recovered int
	// Superseded counts the state_changed deliveries that became SUPERSEDED
	// instead, since a newer state of the same (sensor, channel, target) exists.
	Superseded int
}

// RecoverDeliveries requeues, in one statement, every delivery of the client in
// one of states (FAILED, GIVEN_UP) whose event is at or after since (the caller
// bounds it by the retention): each becomes PENDING with a fresh budget of
// attempts, due in event order (one microsecond apart), except a state_changed
// one with a newer state_changed of the same (sensor, channel, target) that is
// not SUPERSEDED, which becomes SUPERSEDED: sending it would put an older state
// after a newer one. SUPERSEDED deliveries are never touched. It returns
// ErrNotFound for an unknown client.
func (p *Postgres) RecoverDeliveries(ctx context.Context, clientID string, since time.Time, states []DeliveryState) (RecoverResult, error) {
	if err := p.requireClient(ctx, clientID); err != nil {
		return RecoverResult{}, err
	}
	names := make([]string, 0, len(states))
	for _, s := range states {
		if s != DeliveryFailed && s != DeliveryGivenUp {
			return RecoverResult{}, fmt.Errorf("recovering deliveries: state %q cannot be recovered", s)
		}
		names = append(names, string(s))
	}
	var res RecoverResult
	err := p.pool.QueryRow(ctx, `
		WITH w AS (
			SELECT d.id, d.event_at, d.state,
			       d.event_type = 'state_changed' AND count(*) FILTER (
			           WHERE d.event_type = 'state_changed' AND d.state <> 'SUPERSEDED') OVER (
			           PARTITION BY d.sensor_id, d.channel, d.target ORDER BY d.event_at, d.seq
			           ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) > 0 AS stale,
			       row_number() OVER (ORDER BY d.event_at, d.seq) AS rn
			FROM deliveries d
			WHERE d.client_id = $1 AND d.event_at >= $2 AND d.notification_id IS NOT NULL
		), u AS (
			UPDATE deliveries d
			SET state = CASE WHEN w.stale THEN 'SUPERSEDED' ELSE 'PENDING' END,
			    attempts = CASE WHEN w.stale THEN d.attempts ELSE 0 END,
			    next_attempt_at = now() + w.rn * interval '1 microsecond', leased_until = NULL,
			    last_error = CASE WHEN w.stale THEN $4 ELSE d.last_error END, updated_at = now()
			FROM w
			WHERE d.id = w.id AND d.event_at = w.event_at AND w.state = ANY ($3::text[]) AND d.state = ANY ($3::text[])
			RETURNING d.state
		)
		SELECT count(*) FILTER (WHERE state = 'PENDING'), count(*) FILTER (WHERE state = 'SUPERSEDED') FROM u`,
		clientID, since, names, SupersededError).Scan(&res.Recovered, &res.Superseded)
	if err != nil {
		return RecoverResult{}, fmt.Errorf("recovering deliveries of client %s: %w", clientID, err)
	}
	return res, nil
}
