package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// maxUUID sorts after every delivery id; it starts a newest-first listing.
const maxUUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"

// ListClientDeliveriesNewestFirst is ListClientDeliveries read the other way, as a
// delivery history is browsed: a page of the client's deliveries matching f, newest
// first by id (ids are UUIDv7, so that is creation order), holding only deliveries
// older than page.After (the last id of the previous page) when it is set. It
// returns ErrNotFound when the client does not exist, even if deliveries of a
// deleted client remain.
func (p *Postgres) ListClientDeliveriesNewestFirst(ctx context.Context, clientID string, f DeliveryFilter, page Page) ([]Delivery, error) {
	if uuid.Validate(clientID) != nil {
		return nil, fmt.Errorf("listing deliveries of client %s: %w", clientID, ErrNotFound)
	}
	before := page.After
	if before == "" {
		before = maxUUID
	} else if uuid.Validate(before) != nil {
		return nil, fmt.Errorf("listing deliveries before %q: not a delivery id", before)
	}
	if f.State != "" && !f.State.Valid() {
		return nil, fmt.Errorf("listing deliveries: unknown state %q", f.State)
	}
	var exists bool
	if err := p.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM clients WHERE id = $1)`, clientID).Scan(&exists); err != nil {
		return nil, fmt.Errorf("listing deliveries of client %s: %w", clientID, err)
	}
	if !exists {
		return nil, fmt.Errorf("listing deliveries of client %s: %w", clientID, ErrNotFound)
	}
	return p.clientDeliveries(ctx, clientID, f, before, true, page.Limit)
}

// clientDeliveries reads up to limit of the client's deliveries matching f by id
// from the cursor id on, cursor excluded: ascending, or descending when
// newestFirst. deliveries_client_idx (client_id, id), read either way, serves the
// order, so a page costs its own rows plus those the filters skip, not the whole
// history.
func (p *Postgres) clientDeliveries(ctx context.Context, clientID string, f DeliveryFilter, cursor string,
	newestFirst bool, limit int) ([]Delivery, error) {
	var from, to *time.Time
	if !f.From.IsZero() {
		from = &f.From
	}
	if !f.To.IsZero() {
		to = &f.To
	}
	past, order := `> $2`, `id`
	if newestFirst {
		past, order = `< $2`, `id DESC`
	}
	// Three sources, each read in id order and limited: the outbox's rows,
	// handed-over webhooks in flight, and handed-over webhooks delivered at the
	// first attempt, which have no row but their attempt (migration 00240).
	rows, err := p.pool.Query(ctx, `SELECT `+deliveryColumns+`
		FROM (
			(SELECT `+deliveryRowColumns+`
			 FROM deliveries
			 WHERE client_id = $1 AND id `+past+` AND ($5 = '' OR state = $5)
			   AND ($3::timestamptz IS NULL OR event_at >= $3) AND ($4::timestamptz IS NULL OR event_at < $4)
			 ORDER BY `+order+` LIMIT $6)
			UNION ALL
			(SELECT `+inFlightDeliveryColumns+`
			 FROM webhooks_in_flight
			 WHERE client_id = $1 AND id `+past+` AND $5 IN ('', 'IN_FLIGHT')
			   AND ($3::timestamptz IS NULL OR event_at >= $3) AND ($4::timestamptz IS NULL OR event_at < $4))
			UNION ALL
			(SELECT `+sentAttemptDeliveryColumns+`
			 FROM delivery_attempts a
			 JOIN notifications n ON n.id = a.notification_id
			 WHERE a.client_id = $1 AND a.channel = 'webhook' AND a.attempt = 1 AND a.status = 'SENT'
			   AND a.recorded AND a.delivery_id `+past+` AND $5 IN ('', 'SENT')
			   AND ($3::timestamptz IS NULL OR n.event_at >= $3) AND ($4::timestamptz IS NULL OR n.event_at < $4)
			   AND NOT EXISTS (SELECT 1 FROM deliveries x WHERE x.id = a.delivery_id)
			 ORDER BY a.delivery_`+order+` LIMIT $6)
		) d LEFT JOIN notifications n ON n.id = d.notification_id AND n.event_at = d.event_at
		ORDER BY d.`+order+` LIMIT $6`,
		clientID, cursor, from, to, string(f.State), limit)
	if err != nil {
		return nil, fmt.Errorf("listing deliveries of client %s: %w", clientID, err)
	}
	out, err := collectDeliveries(rows)
	if err != nil {
		return nil, fmt.Errorf("listing deliveries of client %s: %w", clientID, err)
	}
	return out, nil
}

// requireClient returns ErrNotFound unless the client exists: the outbox's
// reads and changes per client answer so for an unknown client.
func (p *Postgres) requireClient(ctx context.Context, id string) error {
	if uuid.Validate(id) != nil {
		return fmt.Errorf("getting client %s: %w", id, ErrNotFound)
	}
	var exists bool
	if err := p.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM clients WHERE id = $1)`, id).Scan(&exists); err != nil {
		return fmt.Errorf("getting client %s: %w", id, err)
	}
	if !exists {
		return fmt.Errorf("getting client %s: %w", id, ErrNotFound)
	}
	return nil
}
