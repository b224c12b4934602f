package storage

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

// The operator console's reads (its sessions are console.RedisStore's). Every read here costs what one
// page shows, not what the fleet holds: counts come from Redis cardinalities and the
// planner's estimate, lists from index ranges, summaries from a bounded window.

// EndpointHealth is how one endpoint of a client (its webhook, its mailbox or one
// device) fared in a DeliverySummary.
type EndpointHealth struct {
	Channel Channel
	// Target is the device ("IOS:<push key>") for swrve, empty otherwise.
	Target string
	// States counts the endpoint's deliveries by state.
	States map[DeliveryState]int
	// LastError and LastHTTPStatus are those of its latest delivery that failed or
	// waits for a retry, at LastFailureAt; empty when none did.
	LastError      string
	LastHTTPStatus int
	LastFailureAt  time.Time
}

// Failing counts the endpoint's deliveries that failed, gave up or wait to retry.
func (e EndpointHealth) Failing() int {
	return e.States[DeliveryFailed] + e.States[DeliveryGivenUp] + e.States[DeliveryRetry]
}

// DeliverySummary is what a client's newest deliveries say: their states and how
// each endpoint fared.
type DeliverySummary struct {
	// Since and Window bound what was read: deliveries created since Since, at most
	// the newest Window of them. Read is how many there were.
	Since  time.Time
	Window int
	Read   int
	States map[DeliveryState]int
	// Endpoints are ordered by failing deliveries, most first.
	Endpoints []EndpointHealth
}

// ClientDeliverySummary summarises the client's deliveries created since since, at
// most the newest window of them, in one statement: its cost is bounded by window
// whatever the client's history holds.
func (p *Postgres) ClientDeliverySummary(ctx context.Context, clientID string, since time.Time, window int) (DeliverySummary, error) {
	sum := DeliverySummary{Since: since, Window: window, States: map[DeliveryState]int{}}
	if uuid.Validate(clientID) != nil {
		return sum, fmt.Errorf("summarising deliveries of client %s: %w", clientID, ErrNotFound)
	}
	// Ids are UUIDv7: the smallest id of since's millisecond bounds the range of
	// deliveries_client_idx to read.
	rows, err := p.pool.Query(ctx, `
		SELECT channel, target, state, count(*), max(updated_at),
		       (array_agg(last_error ORDER BY updated_at DESC))[1],
		       (array_agg(coalesce(last_http_status, 0) ORDER BY updated_at DESC))[1]
		FROM (SELECT channel, target, state, updated_at, last_error, last_http_status
		      FROM deliveries WHERE client_id = $1 AND id >= $2
		      ORDER BY id DESC LIMIT $3) d
		GROUP BY channel, target, state`,
		clientID, uuidFloor(since), window)
	if err != nil {
		return sum, fmt.Errorf("summarising deliveries of client %s: %w", clientID, err)
	}
	defer rows.Close()
	byEndpoint := map[[2]string]*EndpointHealth{}
	var order []*EndpointHealth
	for rows.Next() {
		var (
			channel, target, lastErr string
			state                    DeliveryState
			n, status                int
			at                       time.Time
		)
		if err := rows.Scan(&channel, &target, &state, &n, &at, &lastErr, &status); err != nil {
			return sum, fmt.Errorf("reading the delivery summary of client %s: %w", clientID, err)
		}
		sum.Read += n
		sum.States[state] += n
		ep := byEndpoint[[2]string{channel, target}]
		if ep == nil {
			ep = &EndpointHealth{Channel: Channel(channel), Target: target, States: map[DeliveryState]int{}}
			byEndpoint[[2]string{channel, target}] = ep
			order = append(order, ep)
		}
		ep.States[state] += n
		failing := state == DeliveryFailed || state == DeliveryGivenUp || state == DeliveryRetry
		if failing && at.After(ep.LastFailureAt) {
			ep.LastFailureAt, ep.LastError, ep.LastHTTPStatus = at, lastErr, status
		}
	}
	if err := rows.Err(); err != nil {
		return sum, fmt.Errorf("reading the delivery summary of client %s: %w", clientID, err)
	}
	for _, ep := range order {
		sum.Endpoints = append(sum.Endpoints, *ep)
	}
	sortEndpoints(sum.Endpoints)
	return sum, nil
}

// ClientFailedDeliveries returns a page of the client's FAILED and GIVEN_UP
// deliveries, newest first, older than page.After (a delivery id) when it is set.
// deliveries_failed_idx holds only those, so a page costs its own rows.
func (p *Postgres) ClientFailedDeliveries(ctx context.Context, clientID string, page Page) ([]Delivery, error) {
	if uuid.Validate(clientID) != nil {
		return nil, fmt.Errorf("listing failed deliveries of client %s: %w", clientID, ErrNotFound)
	}
	before := page.After
	if before == "" {
		before = maxUUID
	} else if uuid.Validate(before) != nil {
		return nil, fmt.Errorf("listing failed deliveries before %q: not a delivery id", before)
	}
	rows, err := p.pool.Query(ctx, `SELECT `+deliveryColumns+`
		FROM deliveries d LEFT JOIN notifications n ON n.id = d.notification_id AND n.event_at = d.event_at
		WHERE d.client_id = $1 AND d.state IN ('FAILED', 'GIVEN_UP') AND d.id < $2
		ORDER BY d.id DESC LIMIT $3`, clientID, before, page.Limit)
	if err != nil {
		return nil, fmt.Errorf("listing failed deliveries of client %s: %w", clientID, err)
	}
	out, err := collectDeliveries(rows)
	if err != nil {
		return nil, fmt.Errorf("listing failed deliveries of client %s: %w", clientID, err)
	}
	return out, nil
}

// sortEndpoints puts the endpoints with the most failing deliveries first.
func sortEndpoints(eps []EndpointHealth) {
	slices.SortStableFunc(eps, func(a, b EndpointHealth) int {
		if c := cmp.Compare(b.Failing(), a.Failing()); c != 0 {
			return c
		}
		return cmp.Compare(string(a.Channel)+a.Target, string(b.Channel)+b.Target)
	})
}

// uuidFloor is the smallest UUIDv7 of t's millisecond.
func uuidFloor(t time.Time) string {
	var u uuid.UUID
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(max(t.UnixMilli(), 0)))
	copy(u[:6], ms[2:])
	return u.String()
}
