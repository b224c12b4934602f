package webapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/storage"
)

// DeliveryStore is the part of storage.Postgres the delivery routes use: the
// outbox.
type DeliveryStore interface {
	// ListClientDeliveriesNewestFirst returns a page of the client's deliveries
	// matching the filter, newest first by id, older than page.After; ErrNotFound
	// for an unknown client.
	ListClientDeliveriesNewestFirst(ctx context.Context, clientID string, f storage.DeliveryFilter, page storage.Page) ([]storage.Delivery, error)
	// GetDelivery returns the delivery, or ErrNotFound.
	GetDelivery(ctx context.Context, id string) (storage.Delivery, error)
	// RetryDelivery makes a FAILED or GIVEN_UP delivery PENDING again; ErrNotFound
	// for an unknown id, ErrConflict for a delivery in another state.
	RetryDelivery(ctx context.Context, id string) (storage.Delivery, error)
}

// DeliveryAttempts is the part of storage.ClickHouse GET /v1/deliveries/{id} reads:
// every recorded attempt of a delivery, oldest first.
type DeliveryAttempts interface {
	DeliveryAttempts(ctx context.Context, deliveryID string) ([]storage.DeliveryAttempt, error)
}

// validDeliveryID reports whether id can be a delivery id (a UUID).
func validDeliveryID(id string) bool {
	return uuid.Validate(id) == nil
}

// deliveryBody is a delivery as the API shows it. Members that do not apply are
// null rather than absent, so every item has the same shape: the event's members
// for a delivery that belongs to no sensor event (a standalone push), target off
// swrve, next_attempt_at once nothing is waiting, the last error and HTTP status
// before there is one.
type deliveryBody struct {
	ID             string  `json:"id"`
	ClientID       *string `json:"client_id"`
	NotificationID *string `json:"notification_id"`
	EventID        *string `json:"event_id"`
	EventType      *string `json:"event_type"`
	SensorID       *string `json:"sensor_id"`
	Channel        string  `json:"channel"`
	Target         *string `json:"target"`
	State          string  `json:"state"`
	// Attempts counts the attempts made since the delivery was created or last
	// retried through the API.
	Attempts       int        `json:"attempts"`
	NextAttemptAt  *time.Time `json:"next_attempt_at"`
	LastError      *string    `json:"last_error"`
	LastHTTPStatus *int       `json:"last_http_status"`
	EventAt        time.Time  `json:"event_at"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

// nullable returns nil for the zero value, a pointer to v otherwise.
func nullable[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

func renderDelivery(d storage.Delivery) deliveryBody {
	body := deliveryBody{
		ID:             d.ID,
		ClientID:       nullable(d.ClientID),
		NotificationID: nullable(d.NotificationID),
		EventID:        nullable(d.EventID),
		EventType:      nullable(d.EventType),
		SensorID:       nullable(d.SensorID),
		Channel:        string(d.Channel),
		Target:         nullable(d.Target),
		State:          string(d.State),
		Attempts:       d.Attempts,
		LastError:      nullable(d.LastError),
		LastHTTPStatus: nullable(d.LastHTTPStatus),
		EventAt:        d.EventAt.UTC(),
		CreatedAt:      d.CreatedAt.UTC(),
		UpdatedAt:      d.UpdatedAt.UTC(),
	}
	// The outbox keeps the last due time of a finished or claimed delivery;
	// showing it would suggest another attempt is coming.
	switch d.State {
	case storage.DeliveryScheduled, storage.DeliveryPending, storage.DeliveryRetry:
		next := d.NextAttemptAt.UTC()
		body.NextAttemptAt = &next
	}
	return body
}

func deliveryKey(d storage.Delivery) string { return d.ID }

// attemptBody is one attempt of a delivery as the API shows it.
type attemptBody struct {
	Attempt    int     `json:"attempt"`
	Status     string  `json:"status"`
	HTTPStatus *int    `json:"http_status"`
	ErrorType  *string `json:"error_type"`
	Error      *string `json:"error"`
	// AnswerCode and AnswerMessage are the receiver's own code and message
	// from its answer body (Swrve's {"code","message"}); null when it gave none.
	AnswerCode    *int    `json:"answer_code"`
	AnswerMessage *string `json:"answer_message"`
	DurationMS    int64   `json:"duration_ms"`
	// At is when the attempt ended, to the second.
	At time.Time `json:"at"`
}

// deliveryDetailBody is the answer of GET /v1/deliveries/{id}: the delivery and
// every attempt recorded for it.
type deliveryDetailBody struct {
	deliveryBody
	AttemptLog []attemptBody `json:"attempt_log"`
}

// deliveryStates lists the states a status filter may name, for its 400.
const deliveryStates = "SCHEDULED, PENDING, IN_FLIGHT, RETRY, PAUSED, SENT, FAILED, GIVEN_UP, SUPERSEDED"

// deliveriesDisabled is the 503 of every delivery route on a server built without
// WithDeliveries.
func deliveriesDisabled() error {
	return unavailable("deliveries are disabled: the server has no outbox store")
}

// deliveryFromPath returns the {id} of the route, or a 404 when it cannot name a
// delivery.
func deliveryFromPath(r *http.Request) (string, error) {
	id := chi.URLParam(r, "id")
	if !validDeliveryID(id) {
		return "", httpapi.NotFound("delivery %q not found: a delivery id is a UUID", id)
	}
	return id, nil
}

func deliveryNotFound(id string) error {
	return httpapi.NotFound("delivery %q not found", id)
}

func deliveryLocation(id string) string {
	return "/v1/deliveries/" + url.PathEscape(id)
}

// listClientDeliveries handles GET /v1/clients/{id}/deliveries: the client's
// deliveries, newest first, whose event happened in [from, to) (history's rules:
// the last 24 hours by default, at most 31 days), optionally in one state.
func (s *Server) listClientDeliveries(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	q, err := parseRangeQuery(r, s.cfg.Now(), maxDeliveriesRange)
	if err != nil {
		return err
	}
	p, err := parsePage(r, validDeliveryID)
	if err != nil {
		return err
	}
	filter := storage.DeliveryFilter{From: q.from, To: q.to}
	if raw := r.URL.Query().Get("status"); raw != "" {
		filter.State = storage.DeliveryState(raw)
		if !filter.State.Valid() {
			return httpapi.InvalidParameter("status must be one of %s, got %q", deliveryStates, raw)
		}
	}
	if s.deliveries == nil {
		return deliveriesDisabled()
	}
	deliveries, err := s.deliveries.ListClientDeliveriesNewestFirst(r.Context(), id, filter,
		storage.Page{After: p.after, Limit: p.limit + 1})
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("listing deliveries of client: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, newPageBody(deliveries, p.limit, deliveryKey, renderDelivery))
}

// getDelivery handles GET /v1/deliveries/{id}: the delivery from the outbox and its
// attempts from ClickHouse. The attempt log can trail the outbox by the retrier's
// flush interval, so a delivery's attempts count may run ahead of its log.
func (s *Server) getDelivery(w http.ResponseWriter, r *http.Request) error {
	id, err := deliveryFromPath(r)
	if err != nil {
		return err
	}
	if s.deliveries == nil {
		return deliveriesDisabled()
	}
	if s.attempts == nil {
		return unavailable("delivery attempts are unavailable: the server has no ClickHouse store")
	}
	d, err := s.deliveries.GetDelivery(r.Context(), id)
	if errors.Is(err, storage.ErrNotFound) {
		return deliveryNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("getting delivery: %w", err)
	}
	// d.ID is the canonical form of the id; ClickHouse compares ids as strings, and
	// the path may spell the UUID in capitals or braces.
	attempts, err := s.attempts.DeliveryAttempts(r.Context(), d.ID)
	if err != nil {
		return fmt.Errorf("reading attempts of delivery: %w", err)
	}
	body := deliveryDetailBody{deliveryBody: renderDelivery(d), AttemptLog: make([]attemptBody, 0, len(attempts))}
	for _, a := range attempts {
		body.AttemptLog = append(body.AttemptLog, attemptBody{
			Attempt:       a.Attempt,
			Status:        string(a.Status),
			HTTPStatus:    nullable(a.HTTPStatus),
			ErrorType:     nullable(a.ErrorType),
			Error:         nullable(a.Error),
			AnswerCode:    nullable(a.AnswerCode),
			AnswerMessage: nullable(a.AnswerMessage),
			DurationMS:    a.Duration.Milliseconds(),
			At:            a.At.UTC(),
		})
	}
	return httpapi.WriteJSON(w, http.StatusOK, body)
}

// retryDelivery handles POST /v1/deliveries/{id}/retry: a FAILED or GIVEN_UP
// delivery becomes PENDING, due at once with a fresh budget of attempts, and the
// answer is 202 since the attempt itself happens later, in a retrier.
func (s *Server) retryDelivery(w http.ResponseWriter, r *http.Request) error {
	id, err := deliveryFromPath(r)
	if err != nil {
		return err
	}
	if s.deliveries == nil {
		return deliveriesDisabled()
	}
	d, err := s.deliveries.RetryDelivery(r.Context(), id)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return deliveryNotFound(id)
	case errors.Is(err, storage.ErrConflict):
		return s.retryConflict(r.Context(), id)
	case err != nil:
		return fmt.Errorf("retrying delivery: %w", err)
	}
	w.Header().Set("Location", deliveryLocation(d.ID))
	return httpapi.WriteJSON(w, http.StatusAccepted, renderDelivery(d))
}

// retryConflict builds the 409 of a retry refused because of the delivery's state,
// naming the state. The state is read again: the store's conflict says only that
// it was not FAILED or GIVEN_UP.
func (s *Server) retryConflict(ctx context.Context, id string) error {
	d, err := s.deliveries.GetDelivery(ctx, id)
	if errors.Is(err, storage.ErrNotFound) {
		return deliveryNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("reading state of delivery refused a retry: %w", err)
	}
	if d.State == storage.DeliveryFailed || d.State == storage.DeliveryGivenUp {
		// It finished while the retry was being refused (it was IN_FLIGHT then).
		return httpapi.Conflict("delivery %s changed state during the retry and is %s now; ask again", d.ID, d.State)
	}
	return httpapi.Conflict("delivery %s is %s; only FAILED and GIVEN_UP deliveries can be retried", d.ID, d.State)
}
