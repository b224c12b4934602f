package webapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/internal/httpapi"
	lsmetrics "github.com/lockstream/lockstream/internal/metrics"
	"github.com/lockstream/lockstream/storage"
)

// DeliveryControls is the part of storage.Postgres the delivery-control routes
// use (docs/DESIGN.md "Delivery controls"): a client's webhook endpoint and the
// recovery of its failed deliveries.
type DeliveryControls interface {
	// EnableEndpoint enables the client's webhook endpoint and resumes its
	// PAUSED deliveries in order, returning how many; ErrNotFound for an
	// unknown client.
	EnableEndpoint(ctx context.Context, clientID string) (int, error)
	// EndpointEvents returns the client's newest endpoint events, newest first.
	EndpointEvents(ctx context.Context, clientID string, limit int) ([]storage.EndpointEvent, error)
	// RecoverDeliveries requeues the client's deliveries in states since the
	// time, in one statement; ErrNotFound for an unknown client.
	RecoverDeliveries(ctx context.Context, clientID string, since time.Time, states []storage.DeliveryState) (storage.RecoverResult, error)
}

// endpointEventsShown is how many endpoint events GET /v1/clients/{id}/endpoint
// shows.
const endpointEventsShown = 20

// WithDeliveryControls serves POST /v1/clients/{id}/endpoint/enable,
// GET /v1/clients/{id}/endpoint and POST /v1/clients/{id}/deliveries/recover
// from store; recovery looks back at most retention (the outbox's, whose older
// months are dropped). Without it they answer 503.
func WithDeliveryControls(store DeliveryControls, retention time.Duration) Option {
	return func(s *Server) {
		s.controls = store
		s.retention = retention
	}
}

// controlMetrics are the delivery controls' instruments.
type controlMetrics struct {
	recovered  prometheus.Counter
	superseded prometheus.Counter
	resumed    prometheus.Counter
}

func newControlMetrics(reg prometheus.Registerer) (*controlMetrics, error) {
	m := &controlMetrics{
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_deliveries_recovered_total",
			Help: "FAILED and GIVEN_UP deliveries made PENDING again by POST /v1/clients/{id}/deliveries/recover.",
		}),
		superseded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_deliveries_recover_superseded_total",
			Help: "Deliveries a recover made SUPERSEDED instead, since a newer state of their sensor exists.",
		}),
		resumed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockstream_deliveries_resumed_total",
			Help: "PAUSED deliveries made PENDING again by POST /v1/clients/{id}/endpoint/enable.",
		}),
	}
	if err := lsmetrics.RegisterAll(reg, m.recovered, m.superseded, m.resumed); err != nil {
		return nil, fmt.Errorf("delivery controls: %w", err)
	}
	return m, nil
}

func controlsDisabled() error {
	return unavailable("delivery controls are disabled: the server has no outbox store")
}

// enableEndpoint handles POST /v1/clients/{id}/endpoint/enable.
func (s *Server) enableEndpoint(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	if s.controls == nil {
		return controlsDisabled()
	}
	resumed, err := s.controls.EnableEndpoint(r.Context(), id)
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("enabling endpoint: %w", err)
	}
	s.controlMetrics.resumed.Add(float64(resumed))
	return httpapi.WriteJSON(w, http.StatusOK, map[string]any{"state": "enabled", "resumed": resumed})
}

// endpointEventBody is an endpoint event as the API shows it.
type endpointEventBody struct {
	Type       string     `json:"type"`
	Detail     string     `json:"detail"`
	At         time.Time  `json:"at"`
	EmailedAt  *time.Time `json:"emailed_at"`
	EmailError *string    `json:"email_error"`
}

// getEndpoint handles GET /v1/clients/{id}/endpoint: the endpoint's state and
// its newest events.
func (s *Server) getEndpoint(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	if s.controls == nil {
		return controlsDisabled()
	}
	client, err := s.registry.GetClient(r.Context(), id)
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("getting client: %w", err)
	}
	events, err := s.controls.EndpointEvents(r.Context(), id, endpointEventsShown)
	if err != nil {
		return fmt.Errorf("listing endpoint events: %w", err)
	}
	out := struct {
		endpointBody
		WebhookURL string              `json:"webhook_url"`
		RateLimit  *int                `json:"rate_limit"`
		Events     []endpointEventBody `json:"events"`
	}{endpointBody: renderEndpoint(client), WebhookURL: client.WebhookURL, RateLimit: nullable(client.RateLimit),
		Events: make([]endpointEventBody, 0, len(events))}
	for _, e := range events {
		b := endpointEventBody{Type: e.Type, Detail: e.Detail, At: e.At.UTC(), EmailError: nullable(e.EmailError)}
		if !e.EmailedAt.IsZero() {
			at := e.EmailedAt.UTC()
			b.EmailedAt = &at
		}
		out.Events = append(out.Events, b)
	}
	return httpapi.WriteJSON(w, http.StatusOK, out)
}

// recoverDeliveries handles POST /v1/clients/{id}/deliveries/recover
// {"since": RFC 3339, "states": ["FAILED","GIVEN_UP"]}: every matching delivery
// of the client is requeued in event order, in one statement; since earlier
// than the retention is taken as now − retention (nothing older is kept).
func (s *Server) recoverDeliveries(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	if s.controls == nil {
		return controlsDisabled()
	}
	var req struct {
		Since  optional[time.Time] `json:"since"`
		States optional[[]string]  `json:"states"`
	}
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	var errs httpapi.FieldErrors
	if !req.Since.set || req.Since.null {
		errs.Add("since", "is required: an RFC 3339 time")
	}
	states := []storage.DeliveryState{storage.DeliveryFailed, storage.DeliveryGivenUp}
	if req.States.set && !req.States.null {
		states = states[:0]
		if len(req.States.value) == 0 {
			errs.Add("states", "must name FAILED, GIVEN_UP or both")
		}
		for i, st := range req.States.value {
			if st != string(storage.DeliveryFailed) && st != string(storage.DeliveryGivenUp) {
				errs.Add(fmt.Sprintf("states[%d]", i), "must be FAILED or GIVEN_UP, got %q", st)
			}
			states = append(states, storage.DeliveryState(st))
		}
	}
	if err := errs.Err(); err != nil {
		return err
	}
	since := req.Since.value
	if s.retention > 0 {
		since = maxTime(since, s.cfg.Now().Add(-s.retention))
	}
	res, err := s.controls.RecoverDeliveries(r.Context(), id, since, states)
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("recovering deliveries: %w", err)
	}
	s.controlMetrics.recovered.Add(float64(res.Recovered))
	s.controlMetrics.superseded.Add(float64(res.Superseded))
	return httpapi.WriteJSON(w, http.StatusAccepted, map[string]any{
		"recovered": res.Recovered, "superseded": res.Superseded, "since": since.UTC()})
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
