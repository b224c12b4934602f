package webapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/storage"
)

// linkFromPath returns the client and sensor ids of a link route, or a 404 when
// either cannot name a row.
func linkFromPath(r *http.Request) (clientID, sensorID string, err error) {
	if clientID, err = clientFromPath(r); err != nil {
		return "", "", err
	}
	sensorID = chi.URLParam(r, "sensor_id")
	if !validSensorID(sensorID) {
		return "", "", httpapi.NotFound("sensor %q not found: a sensor id is 1 to 16 ASCII letters or digits", sensorID)
	}
	return clientID, sensorID, nil
}

// linkSensor handles PUT /v1/clients/{id}/sensors/{sensor_id}: the client watches the
// sensor from now on. Linking twice is not an error.
func (s *Server) linkSensor(w http.ResponseWriter, r *http.Request) error {
	clientID, sensorID, err := linkFromPath(r)
	if err != nil {
		return err
	}
	err = s.registry.LinkSensor(r.Context(), clientID, sensorID)
	if errors.Is(err, storage.ErrNotFound) {
		return s.missingLinkEnd(r.Context(), clientID, sensorID)
	}
	if err != nil {
		return fmt.Errorf("linking sensor: %w", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// unlinkSensor handles DELETE /v1/clients/{id}/sensors/{sensor_id}; it is a 404 when
// the client did not watch the sensor.
func (s *Server) unlinkSensor(w http.ResponseWriter, r *http.Request) error {
	clientID, sensorID, err := linkFromPath(r)
	if err != nil {
		return err
	}
	err = s.registry.UnlinkSensor(r.Context(), clientID, sensorID)
	if errors.Is(err, storage.ErrNotFound) {
		return s.missingLinkEnd(r.Context(), clientID, sensorID)
	}
	if err != nil {
		return fmt.Errorf("unlinking sensor: %w", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// missingLinkEnd explains a link operation's ErrNotFound: the storage cannot tell
// whether the client, the sensor or the link is missing, and the caller needs to know
// which.
func (s *Server) missingLinkEnd(ctx context.Context, clientID, sensorID string) error {
	if _, err := s.registry.GetClient(ctx, clientID); errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(clientID)
	} else if err != nil {
		return fmt.Errorf("checking client of link: %w", err)
	}
	if _, err := s.registry.GetSensor(ctx, sensorID); errors.Is(err, storage.ErrNotFound) {
		return sensorNotFound(sensorID)
	} else if err != nil {
		return fmt.Errorf("checking sensor of link: %w", err)
	}
	return httpapi.NotFound("client %q does not watch sensor %q", clientID, sensorID)
}
