package webapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/internal/httpapi"
)

// UnregisteredSensors lists the unregistered sensor ids the consumers saw most
// (the consumer's store).
type UnregisteredSensors interface {
	TopUnregistered(ctx context.Context, since time.Time, limit int) ([]domain.UnregisteredSensor, error)
}

// WithUnregistered serves GET /v1/sensors/unregistered from store.
func WithUnregistered(store UnregisteredSensors) Option {
	return func(s *Server) { s.unregistered = store }
}

// unregisteredWindow is how far back GET /v1/sensors/unregistered looks.
const unregisteredWindow = 24 * time.Hour

type unregisteredBody struct {
	SensorID string    `json:"sensor_id"`
	Count    int64     `json:"count"`
	MinCount int64     `json:"min_count"`
	LastSeen time.Time `json:"last_seen"`
}

// listUnregistered handles GET /v1/sensors/unregistered: the ids not registered
// that sent the most readings over the last 24 hours, most first, from the
// consumers' hourly summaries (see DESIGN.md). It is one page: limit (at most
// 1,000) and no cursor.
func (s *Server) listUnregistered(w http.ResponseWriter, r *http.Request) error {
	if s.unregistered == nil {
		return unavailable("unregistered sensors are not served by this process")
	}
	limit := defaultLimit
	if raw := r.URL.Query().Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > maxLimit {
			return httpapi.InvalidParameter("limit must be an integer from 1 to %d, got %q", maxLimit, raw)
		}
		limit = n
	}
	top, err := s.unregistered.TopUnregistered(r.Context(), s.cfg.Now().Add(-unregisteredWindow), limit)
	if err != nil {
		return fmt.Errorf("listing unregistered sensors: %w", err)
	}
	body := pageBody[unregisteredBody]{Items: make([]unregisteredBody, 0, len(top))}
	for _, u := range top {
		body.Items = append(body.Items, unregisteredBody{SensorID: u.SensorID, Count: u.Count,
			MinCount: max(u.MinCount, 0), LastSeen: u.LastSeen.UTC()})
	}
	return httpapi.WriteJSON(w, http.StatusOK, body)
}
