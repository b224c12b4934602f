package webapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/lockstream/lockstream/storage"
)

// History is the part of storage.ClickHouse the history routes read: a sensor's
// events and readings with from <= time < to, newest first, at most limit.
type History interface {
	SensorEvents(ctx context.Context, sensorID string, from, to time.Time, limit int) ([]storage.HistoryEvent, error)
	SensorReadings(ctx context.Context, sensorID string, from, to time.Time, limit int) ([]storage.HistoryReading, error)
}

// The time range of a history request.
const (
	// defaultHistoryRange is the range asked for when from is left out.
	defaultHistoryRange = 24 * time.Hour
	// maxHistoryRange bounds one request's scan: a month partition, about.
	maxHistoryRange = 31 * 24 * time.Hour
)

// historyQuery is a parsed ?from=&to=&limit=.
type historyQuery struct {
	from, to time.Time
	limit    int
}

// parseHistoryQuery reads from and to (RFC 3339; to defaults to now and from to 24
// hours before to) and limit (1 to maxLimit, default defaultLimit). Each bad value
// is a 400 naming its parameter.
func parseHistoryQuery(r *http.Request, now time.Time) (historyQuery, error) {
	values := r.URL.Query()
	q := historyQuery{to: now, limit: defaultLimit}
	parseTime := func(name string, dst *time.Time) error {
		raw := values.Get(name)
		if raw == "" {
			return nil
		}
		t, err := time.Parse(time.RFC3339Nano, raw)
		if err != nil {
			return invalidParameter("%s must be an RFC 3339 time such as 2026-11-22T10:00:00Z, got %q", name, raw)
		}
		*dst = t
		return nil
	}
	if err := parseTime("to", &q.to); err != nil {
		return historyQuery{}, err
	}
	q.from = q.to.Add(-defaultHistoryRange)
	if err := parseTime("from", &q.from); err != nil {
		return historyQuery{}, err
	}
	if !q.from.Before(q.to) {
		return historyQuery{}, invalidParameter("from (%s) must be before to (%s)",
			q.from.UTC().Format(time.RFC3339Nano), q.to.UTC().Format(time.RFC3339Nano))
	}
	if span := q.to.Sub(q.from); span > maxHistoryRange {
		return historyQuery{}, invalidParameter("from and to are %s apart; a request spans at most 31 days (%s)",
			span, maxHistoryRange)
	}
	if raw := values.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > maxLimit {
			return historyQuery{}, invalidParameter("limit must be an integer from 1 to %d, got %q", maxLimit, raw)
		}
		q.limit = n
	}
	return q, nil
}

// historyBody is the body of both history routes. It has no cursor: to read
// further back, ask again with to set to the oldest item's time (to is exclusive;
// history keeps whole seconds, so items of that very second are left out).
type historyBody[T any] struct {
	Items []T `json:"items"`
}

// eventBody is an event as the history shows it: the fields of the event on
// lockstream.events.
type eventBody struct {
	ID       string    `json:"id"`
	Type     string    `json:"type"`
	SensorID string    `json:"sensor_id"`
	Data     *int      `json:"data"`
	Previous *int      `json:"previous"`
	At       time.Time `json:"at"`
}

// readingBody is a reading as the history shows it.
type readingBody struct {
	SensorID string `json:"sensor_id"`
	Data     int    `json:"data"`
	// TS is the device's time, null when the reading carried none.
	TS *time.Time `json:"ts"`
	// ReceivedAt is the server's receive time, the one from and to select on.
	ReceivedAt time.Time `json:"received_at"`
}

// historyRequest parses what both history routes share. A sensor id that is
// well-formed but unknown is not a 404: history outlives a sensor's registration
// (DELETE keeps it) and readings of unregistered sensors are recorded too, so the
// answer is whatever history holds, possibly nothing.
func (s *Server) historyRequest(r *http.Request) (string, historyQuery, error) {
	id, err := sensorFromPath(r)
	if err != nil {
		return "", historyQuery{}, err
	}
	q, err := parseHistoryQuery(r, time.Now())
	if err != nil {
		return "", historyQuery{}, err
	}
	if s.history == nil {
		return "", historyQuery{}, unavailable("history is disabled: the server has no ClickHouse store")
	}
	return id, q, nil
}

// sensorEvents handles GET /v1/sensors/{id}/events.
func (s *Server) sensorEvents(w http.ResponseWriter, r *http.Request) error {
	id, q, err := s.historyRequest(r)
	if err != nil {
		return err
	}
	events, err := s.history.SensorEvents(r.Context(), id, q.from, q.to, q.limit)
	if err != nil {
		return fmt.Errorf("reading events of sensor: %w", err)
	}
	body := historyBody[eventBody]{Items: make([]eventBody, 0, len(events))}
	for _, e := range events {
		body.Items = append(body.Items, eventBody{
			ID: e.ID, Type: e.Type, SensorID: e.SensorID, Data: e.Data, Previous: e.Previous, At: e.At.UTC(),
		})
	}
	return writeJSON(w, http.StatusOK, body)
}

// sensorReadings handles GET /v1/sensors/{id}/readings.
func (s *Server) sensorReadings(w http.ResponseWriter, r *http.Request) error {
	id, q, err := s.historyRequest(r)
	if err != nil {
		return err
	}
	readings, err := s.history.SensorReadings(r.Context(), id, q.from, q.to, q.limit)
	if err != nil {
		return fmt.Errorf("reading readings of sensor: %w", err)
	}
	body := historyBody[readingBody]{Items: make([]readingBody, 0, len(readings))}
	for _, rd := range readings {
		item := readingBody{SensorID: rd.SensorID, Data: rd.Data, ReceivedAt: rd.ReceivedAt.UTC()}
		if !rd.TS.IsZero() {
			ts := rd.TS.UTC()
			item.TS = &ts
		}
		body.Items = append(body.Items, item)
	}
	return writeJSON(w, http.StatusOK, body)
}
