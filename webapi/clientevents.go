package webapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/storage"
)

// ClientEvents is the part of storage.Postgres GET /v1/clients/{id}/events
// reads: every event delivered to a client, by the client's seq.
type ClientEvents interface {
	// ListClientEvents returns up to limit of the client's events after seq
	// after, in seq order; ErrNotFound for an unknown client.
	ListClientEvents(ctx context.Context, clientID string, after int64, limit int) ([]event.ClientEvent, error)
}

// WithClientEvents serves GET /v1/clients/{id}/events (the reconcile feed)
// from store. Without it the route answers 503.
func WithClientEvents(store ClientEvents) Option {
	return func(s *Server) { s.clientEvents = store }
}

// clientEventPage is the body of GET /v1/clients/{id}/events. NextAfter is the
// after of the next page, absent when this page was not full.
type clientEventPage struct {
	Items     []event.ClientEvent `json:"items"`
	NextAfter *int64              `json:"next_after,omitempty"`
}

// listClientEvents handles GET /v1/clients/{id}/events?after=<seq>&limit=: the
// client's events with a seq after after, oldest first, with no gap, so a
// receiver that missed webhooks pulls what it missed.
func (s *Server) listClientEvents(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	p, err := parsePage(r, func(string) bool { return false })
	if err != nil {
		return err
	}
	var after int64
	if raw := r.URL.Query().Get("after"); raw != "" {
		if after, err = strconv.ParseInt(raw, 10, 64); err != nil || after < 0 {
			return httpapi.InvalidParameter("after must be a seq (an integer, 0 or more), got %q", raw)
		}
	}
	if s.clientEvents == nil {
		return unavailable("the client event feed is disabled: the server has no outbox store")
	}
	events, err := s.clientEvents.ListClientEvents(r.Context(), id, after, p.limit)
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("listing events of client: %w", err)
	}
	body := clientEventPage{Items: events}
	if len(events) == p.limit && p.limit > 0 {
		next := events[len(events)-1].Seq
		body.NextAfter = &next
	}
	return httpapi.WriteJSON(w, http.StatusOK, body)
}
