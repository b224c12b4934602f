package webapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/internal/httpapi"
)

// History is the part of analytics.Store the history routes read: a page of
// a sensor's events or readings.
type History interface {
	SensorEvents(ctx context.Context, q analytics.ListQuery) (analytics.EventPage, error)
	SensorReadings(ctx context.Context, q analytics.ListQuery) (analytics.ReadingPage, error)
}

// noLongestRange lets a history request span any range: a page is bounded by
// rows, and the cursor walks on.
const noLongestRange = time.Duration(0)

// historyQuery is a parsed ?from=&to=&limit=&order=&cursor=&type=.
type historyQuery struct {
	from, to time.Time
	limit    int
	asc      bool
	cursor   string
	types    []string
}

// parseHistoryQuery reads from and to (RFC 3339; to defaults to now and from to 24
// hours before to), limit (1 to maxLimit, default defaultLimit), order (desc, the
// default, or asc), cursor and, when events is true, type (comma-separated event
// types). Each bad value is a 400 naming its parameter.
func parseHistoryQuery(r *http.Request, now time.Time, events bool) (historyQuery, error) {
	values := r.URL.Query()
	q := historyQuery{cursor: values.Get("cursor")}
	switch order := values.Get("order"); order {
	case "", "desc":
	case "asc":
		q.asc = true
	default:
		return historyQuery{}, httpapi.InvalidParameter("order must be asc or desc, got %q", order)
	}
	if raw := values.Get("type"); raw != "" {
		if !events {
			return historyQuery{}, httpapi.InvalidParameter("type filters events only; readings have no type")
		}
		for _, typ := range strings.Split(raw, ",") {
			if !event.Type(typ).Valid() {
				return historyQuery{}, httpapi.InvalidParameter("type: %q is not an event type (%v)", typ, event.Types())
			}
			if !slices.Contains(q.types, typ) {
				q.types = append(q.types, typ)
			}
		}
	}
	r0, err := parseRangeQuery(r, now, noLongestRange)
	if err != nil {
		return historyQuery{}, err
	}
	q.from, q.to, q.limit = r0.from, r0.to, r0.limit
	return q, nil
}

// The time range of a deliveries request (Postgres, month partitions).
const (
	// defaultRange is the range asked for when from is left out.
	defaultRange = 24 * time.Hour
	// maxDeliveriesRange bounds one deliveries request's scan: a month
	// partition, about.
	maxDeliveriesRange = 31 * 24 * time.Hour
)

// rangeQuery is a parsed ?from=&to=&limit=.
type rangeQuery struct {
	from, to time.Time
	limit    int
}

// parseRangeQuery reads from and to (RFC 3339; to defaults to now and from to 24
// hours before to) and limit (1 to maxLimit, default defaultLimit). Each bad value
// is a 400 naming its parameter.
func parseRangeQuery(r *http.Request, now time.Time, maxRange time.Duration) (rangeQuery, error) {
	values := r.URL.Query()
	q := rangeQuery{to: now, limit: defaultLimit}
	parseTime := func(name string, dst *time.Time) error {
		raw := values.Get(name)
		if raw == "" {
			return nil
		}
		t, err := time.Parse(time.RFC3339Nano, raw)
		if err != nil {
			return httpapi.InvalidParameter("%s must be an RFC 3339 time such as 2026-11-22T10:00:00Z, got %q", name, raw)
		}
		*dst = t
		return nil
	}
	if err := parseTime("to", &q.to); err != nil {
		return rangeQuery{}, err
	}
	q.from = q.to.Add(-defaultRange)
	if err := parseTime("from", &q.from); err != nil {
		return rangeQuery{}, err
	}
	if !q.from.Before(q.to) {
		return rangeQuery{}, httpapi.InvalidParameter("from (%s) must be before to (%s)",
			q.from.UTC().Format(time.RFC3339Nano), q.to.UTC().Format(time.RFC3339Nano))
	}
	if span := q.to.Sub(q.from); maxRange > 0 && span > maxRange {
		return rangeQuery{}, httpapi.InvalidParameter("from and to are %s apart; a request spans at most 31 days (%s)",
			span, maxRange)
	}
	if raw := values.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > maxLimit {
			return rangeQuery{}, httpapi.InvalidParameter("limit must be an integer from 1 to %d, got %q", maxLimit, raw)
		}
		q.limit = n
	}
	return q, nil
}

// historyBody is the body of both history routes: a page, and the cursor of the
// next one when more rows exist (ask again with the same parameters and
// cursor=next_cursor).
type historyBody[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
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
func (s *Server) historyRequest(r *http.Request, events bool) (analytics.ListQuery, error) {
	id, err := sensorFromPath(r)
	if err != nil {
		return analytics.ListQuery{}, err
	}
	q, err := parseHistoryQuery(r, s.cfg.Now(), events)
	if err != nil {
		return analytics.ListQuery{}, err
	}
	if s.history == nil {
		return analytics.ListQuery{}, unavailable("history is disabled: the server has no ClickHouse store")
	}
	return analytics.ListQuery{SensorID: id, From: q.from, To: q.to, Limit: q.limit, Asc: q.asc,
		Types: q.types, Cursor: q.cursor}, nil
}

// historyError makes a refused cursor a 400 naming it.
func historyError(what string, err error) error {
	if errors.Is(err, analytics.ErrBadCursor) {
		return httpapi.InvalidParameter("cursor is not a next_cursor of this list with this order")
	}
	return fmt.Errorf("reading %s of sensor: %w", what, err)
}

// sensorEvents handles GET /v1/sensors/{id}/events.
func (s *Server) sensorEvents(w http.ResponseWriter, r *http.Request) error {
	q, err := s.historyRequest(r, true)
	if err != nil {
		return err
	}
	page, err := s.history.SensorEvents(r.Context(), q)
	if err != nil {
		return historyError("events", err)
	}
	// The history shows an event as lockstream.events carried it (event.Event).
	body := historyBody[event.Event]{Items: make([]event.Event, 0, len(page.Items)), NextCursor: page.NextCursor}
	for _, e := range page.Items {
		body.Items = append(body.Items, event.Event{
			ID: e.ID, Type: event.Type(e.Type), SensorID: e.SensorID, Data: e.Data, Previous: e.Previous, At: e.At.UTC(),
		})
	}
	return httpapi.WriteJSON(w, http.StatusOK, body)
}

// sensorReadings handles GET /v1/sensors/{id}/readings.
func (s *Server) sensorReadings(w http.ResponseWriter, r *http.Request) error {
	q, err := s.historyRequest(r, false)
	if err != nil {
		return err
	}
	page, err := s.history.SensorReadings(r.Context(), q)
	if err != nil {
		return historyError("readings", err)
	}
	body := historyBody[readingBody]{Items: make([]readingBody, 0, len(page.Items)), NextCursor: page.NextCursor}
	for _, rd := range page.Items {
		item := readingBody{SensorID: rd.SensorID, Data: rd.Data, ReceivedAt: rd.ReceivedAt.UTC()}
		if !rd.TS.IsZero() {
			ts := rd.TS.UTC()
			item.TS = &ts
		}
		body.Items = append(body.Items, item)
	}
	return httpapi.WriteJSON(w, http.StatusOK, body)
}
