package webapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/storage"
)

// MaintenanceStore keeps maintenance windows (the heartbeat's store).
type MaintenanceStore interface {
	// SetMaintenance sets the sensor's or site's window that has not ended;
	// ErrNotFound for an unknown sensor.
	SetMaintenance(ctx context.Context, w domain.MaintenanceWindow) (domain.MaintenanceWindow, error)
}

// WithMaintenance serves PUT /v1/sensors/{id}/maintenance and PUT
// /v1/sites/{site}/maintenance from store. Without it they answer 503.
func WithMaintenance(store MaintenanceStore) Option {
	return func(s *Server) { s.maintenance = store }
}

// maxMaintenance bounds a window's length.
const maxMaintenance = 31 * 24 * time.Hour

// maintenanceBody is a window as the API shows it.
type maintenanceBody struct {
	ID       string    `json:"id"`
	SensorID string    `json:"sensor_id,omitempty"`
	Site     string    `json:"site,omitempty"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	// Silent lists the sensors lost inside the window so far.
	Silent []string `json:"silent"`
}

// putSensorMaintenance handles PUT /v1/sensors/{id}/maintenance.
func (s *Server) putSensorMaintenance(w http.ResponseWriter, r *http.Request) error {
	id, err := sensorFromPath(r)
	if err != nil {
		return err
	}
	return s.putMaintenance(w, r, domain.MaintenanceWindow{SensorID: id})
}

// putSiteMaintenance handles PUT /v1/sites/{site}/maintenance.
func (s *Server) putSiteMaintenance(w http.ResponseWriter, r *http.Request) error {
	site := chi.URLParam(r, "site")
	var errs httpapi.FieldErrors
	if checkSite(&errs, site); errs.Err() != nil {
		return httpapi.NotFound("site %q not found: a site is 1 to 64 ASCII letters, digits, '_', '-' or '.'", site)
	}
	return s.putMaintenance(w, r, domain.MaintenanceWindow{Site: site})
}

// putMaintenance sets the window of the sensor or site in win from the body
// {"from","to"} (RFC 3339; to after from and in the future, at most 31 days
// long): losses whose deadline falls in it are notified to nobody, and one
// maintenance_ended lists them when it ends. It moves the window not ended
// yet, if there is one.
func (s *Server) putMaintenance(w http.ResponseWriter, r *http.Request, win domain.MaintenanceWindow) error {
	var req struct {
		From *time.Time `json:"from"`
		To   *time.Time `json:"to"`
	}
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	var errs httpapi.FieldErrors
	if req.From == nil {
		errs.Add("from", "is required")
	}
	switch {
	case req.To == nil:
		errs.Add("to", "is required")
	case !req.To.After(s.cfg.Now()):
		errs.Add("to", "must be in the future, got %s", req.To.UTC().Format(time.RFC3339))
	case req.From != nil && !req.To.After(*req.From):
		errs.Add("to", "must be after from")
	case req.From != nil && req.To.Sub(*req.From) > maxMaintenance:
		errs.Add("to", "must be at most %s after from", maxMaintenance)
	}
	if err := errs.Err(); err != nil {
		return err
	}
	if s.maintenance == nil {
		return unavailable("maintenance windows are disabled: the server has no store for them")
	}
	win.From, win.To = req.From.UTC(), req.To.UTC()
	set, err := s.maintenance.SetMaintenance(r.Context(), win)
	if errors.Is(err, storage.ErrNotFound) {
		return sensorNotFound(win.SensorID)
	}
	if err != nil {
		return fmt.Errorf("setting maintenance: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, maintenanceBody{ID: set.ID, SensorID: set.SensorID, Site: set.Site,
		From: set.From.UTC(), To: set.To.UTC(), Silent: append([]string{}, set.Silent...)})
}
