package webapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// Limits of a sensor's fields.
const (
	maxSensorIDLen      = 16
	maxAddressLen       = 256
	minHeartbeatTimeout = time.Minute
	maxHeartbeatTimeout = 168 * time.Hour
	minOpenAlertAfter   = time.Second
	maxOpenAlertAfter   = 30 * 24 * time.Hour
)

// validSensorID reports whether id is 1 to 16 ASCII letters or digits.
func validSensorID(id string) bool {
	if id == "" || len(id) > maxSensorIDLen {
		return false
	}
	for i := range len(id) {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// sensorBody is a sensor as the API shows it.
type sensorBody struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	// Data, ChangedAt and LastSeen are null until known.
	Data             *int       `json:"data"`
	ChangedAt        *time.Time `json:"changed_at"`
	LastSeen         *time.Time `json:"last_seen"`
	Connection       string     `json:"connection"`
	HeartbeatTimeout string     `json:"heartbeat_timeout,omitempty"`
	OpenAlertAfter   string     `json:"open_alert_after,omitempty"`
	Site             string     `json:"site,omitempty"`
	CreatedAt        time.Time  `json:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
}

// renderSensors shows sensors with the heartbeat's view of them, asked for all of
// them at once. A failing heartbeat store degrades the answer to "unknown" rather
// than failing a registry read.
func (s *Server) renderSensors(ctx context.Context, sensors []registry.Sensor) []sensorBody {
	var statuses map[string]SensorConnection
	if s.status != nil && len(sensors) > 0 {
		ids := make([]string, len(sensors))
		for i, sensor := range sensors {
			ids[i] = sensor.ID
		}
		var err error
		if statuses, err = s.status.SensorStatuses(ctx, ids); err != nil {
			s.logger.WarnContext(ctx, "reading sensor connection status", "sensors", len(ids), "err", err)
		}
	}
	out := make([]sensorBody, len(sensors))
	for i, sensor := range sensors {
		out[i] = renderSensor(sensor, statuses[sensor.ID])
	}
	return out
}

// renderSensor shows one sensor with what the heartbeat knows of it.
func renderSensor(sensor registry.Sensor, status SensorConnection) sensorBody {
	body := sensorBody{
		ID:         sensor.ID,
		Address:    sensor.Address,
		Connection: ConnectionUnknown,
		CreatedAt:  sensor.CreatedAt.UTC(),
		UpdatedAt:  sensor.UpdatedAt.UTC(),
	}
	if sensor.State != nil {
		data, changedAt := sensor.State.Data, sensor.State.ChangedAt.UTC()
		body.Data, body.ChangedAt = &data, &changedAt
	}
	if sensor.HeartbeatTimeout > 0 {
		body.HeartbeatTimeout = sensor.HeartbeatTimeout.String()
	}
	if sensor.OpenAlertAfter > 0 {
		body.OpenAlertAfter = sensor.OpenAlertAfter.String()
	}
	body.Site = sensor.Site
	lastSeen, connection := status.LastSeen, status.Connection
	if sensor.State == nil {
		// Never reported: the heartbeat tracks it from its registration, which is
		// no sighting. Lost once its timeout passed; until then nobody knows.
		lastSeen = time.Time{}
		if connection == ConnectionOnline {
			connection = ConnectionUnknown
		}
	}
	if !lastSeen.IsZero() {
		lastSeen = lastSeen.UTC()
		body.LastSeen = &lastSeen
	}
	switch connection {
	case ConnectionOnline, ConnectionLost:
		body.Connection = connection
	}
	return body
}

// renderOne shows one sensor with the heartbeat's view of it.
func (s *Server) renderOne(ctx context.Context, sensor registry.Sensor) sensorBody {
	return s.renderSensors(ctx, []registry.Sensor{sensor})[0]
}

// sensorPage is the page body of a sensor list whose query asked for limit+1
// rows, with one status lookup for the page.
func (s *Server) sensorPage(ctx context.Context, sensors []registry.Sensor, limit int) pageBody[sensorBody] {
	shown := sensors[:min(len(sensors), limit)]
	bodies := make(map[string]sensorBody, len(shown))
	for _, b := range s.renderSensors(ctx, shown) {
		bodies[b.ID] = b
	}
	return newPageBody(sensors, limit, sensorKey, func(sensor registry.Sensor) sensorBody { return bodies[sensor.ID] })
}

// sensorLocation is the URL of a sensor's resource.
func sensorLocation(id string) string {
	return "/v1/sensors/" + url.PathEscape(id)
}

// checkAddress adds a field error when address is not a usable address.
func checkAddress(errs *httpapi.FieldErrors, address string) {
	switch {
	case strings.TrimSpace(address) == "":
		errs.Add("address", "must not be empty")
	case utf8.RuneCountInString(address) > maxAddressLen:
		errs.Add("address", "must be at most %d characters", maxAddressLen)
	case !utf8.ValidString(address):
		errs.Add("address", "must be valid UTF-8")
	}
}

// parseHeartbeatTimeout reads a Go duration string within the allowed range, adding a
// field error when it is not one.
func parseHeartbeatTimeout(errs *httpapi.FieldErrors, raw string) time.Duration {
	d, err := time.ParseDuration(raw)
	switch {
	case err != nil:
		errs.Add("heartbeat_timeout", "must be a duration such as \"90m\" or \"2h\", got %q", raw)
	case d < minHeartbeatTimeout || d > maxHeartbeatTimeout:
		errs.Add("heartbeat_timeout", "must be from %s to %s, got %s", minHeartbeatTimeout, maxHeartbeatTimeout, d)
	}
	return d
}

// parseOpenAlertAfter reads open_alert_after, a Go duration string within the
// allowed range, adding a field error when it is not one.
func parseOpenAlertAfter(errs *httpapi.FieldErrors, raw string) time.Duration {
	d, err := time.ParseDuration(raw)
	switch {
	case err != nil:
		errs.Add("open_alert_after", "must be a duration such as \"10m\" or \"1h\", got %q", raw)
	case d < minOpenAlertAfter || d > maxOpenAlertAfter:
		errs.Add("open_alert_after", "must be from %s to %s, got %s", minOpenAlertAfter, maxOpenAlertAfter, d)
	}
	return d
}

// checkSite adds a field error when site cannot name a site: 1 to 64 ASCII
// letters, digits, '_', '-' or '.'.
func checkSite(errs *httpapi.FieldErrors, site string) {
	ok := site != "" && len(site) <= 64
	for i := range len(site) {
		c := site[i]
		ok = ok && ('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.')
	}
	if !ok {
		errs.Add("site", "must be 1 to 64 ASCII letters, digits, '_', '-' or '.', got %q", site)
	}
}

// sensorFromPath returns the {id} of the route, or a 404 when it cannot name a sensor.
func sensorFromPath(r *http.Request) (string, error) {
	id := chi.URLParam(r, "id")
	if !validSensorID(id) {
		return "", httpapi.NotFound("sensor %q not found: a sensor id is 1 to 16 ASCII letters or digits", id)
	}
	return id, nil
}

func sensorNotFound(id string) error {
	return httpapi.NotFound("sensor %q not found", id)
}

// createSensor handles POST /v1/sensors.
func (s *Server) createSensor(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		ID               *string `json:"id"`
		Address          *string `json:"address"`
		HeartbeatTimeout *string `json:"heartbeat_timeout"`
		OpenAlertAfter   *string `json:"open_alert_after"`
		Site             *string `json:"site"`
	}
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	var (
		errs   httpapi.FieldErrors
		sensor registry.Sensor
	)
	switch {
	case req.ID == nil:
		errs.Add("id", "is required")
	case !validSensorID(*req.ID):
		errs.Add("id", "must be 1 to 16 ASCII letters or digits, got %q", *req.ID)
	default:
		sensor.ID = *req.ID
	}
	if req.Address == nil {
		errs.Add("address", "is required")
	} else {
		checkAddress(&errs, *req.Address)
		sensor.Address = *req.Address
	}
	if req.HeartbeatTimeout != nil {
		sensor.HeartbeatTimeout = parseHeartbeatTimeout(&errs, *req.HeartbeatTimeout)
	}
	if req.OpenAlertAfter != nil {
		sensor.OpenAlertAfter = parseOpenAlertAfter(&errs, *req.OpenAlertAfter)
	}
	if req.Site != nil {
		checkSite(&errs, *req.Site)
		sensor.Site = *req.Site
	}
	if err := errs.Err(); err != nil {
		return err
	}

	created, err := s.registry.CreateSensor(r.Context(), sensor)
	if errors.Is(err, storage.ErrConflict) {
		return httpapi.Conflict("sensor %q already exists", sensor.ID)
	}
	if err != nil {
		return fmt.Errorf("creating sensor: %w", err)
	}
	if s.observer != nil {
		if err := s.observer.SensorCreated(r.Context(), created.ID, created.CreatedAt); err != nil {
			s.logger.WarnContext(r.Context(), "telling observer of sensor creation", "sensor", created.ID, "err", err)
		}
	}
	w.Header().Set("Location", sensorLocation(created.ID))
	return httpapi.WriteJSON(w, http.StatusCreated, s.renderOne(r.Context(), created))
}

// listSensors handles GET /v1/sensors.
func (s *Server) listSensors(w http.ResponseWriter, r *http.Request) error {
	p, err := parsePage(r, validSensorID)
	if err != nil {
		return err
	}
	switch connection := r.URL.Query().Get("connection"); connection {
	case "":
	case ConnectionLost:
		return s.listLostSensors(w, r, p)
	default:
		return httpapi.InvalidParameter("connection: the only filter is %q, got %q", ConnectionLost, connection)
	}
	sensors, err := s.registry.ListSensors(r.Context(), storage.Page{After: p.after, Limit: p.limit + 1})
	if err != nil {
		return fmt.Errorf("listing sensors: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, s.sensorPage(r.Context(), sensors, p.limit))
}

func sensorKey(sensor registry.Sensor) string { return sensor.ID }

// listLostSensors handles GET /v1/sensors?connection=lost: the page is a page of the
// heartbeat's lost set, showing the registered sensors in it.
func (s *Server) listLostSensors(w http.ResponseWriter, r *http.Request, p page) error {
	if s.lost == nil {
		return unavailable("the heartbeat is not running in this process, so connection=lost cannot be listed")
	}
	ids, err := s.lost.LostSensorIDs(r.Context(), storage.Page{After: p.after, Limit: p.limit + 1})
	if err != nil {
		return fmt.Errorf("listing lost sensors: %w", err)
	}
	body := pageBody[sensorBody]{Items: []sensorBody{}}
	if len(ids) > p.limit {
		ids = ids[:p.limit]
		body.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(ids[len(ids)-1]))
	}
	if len(ids) == 0 {
		return httpapi.WriteJSON(w, http.StatusOK, body)
	}
	sensors, err := s.registry.SensorsByID(r.Context(), ids)
	if err != nil {
		return fmt.Errorf("listing lost sensors: %w", err)
	}
	body.Items = append(body.Items, s.renderSensors(r.Context(), sensors)...)
	return httpapi.WriteJSON(w, http.StatusOK, body)
}

// getSensor handles GET /v1/sensors/{id}.
func (s *Server) getSensor(w http.ResponseWriter, r *http.Request) error {
	id, err := sensorFromPath(r)
	if err != nil {
		return err
	}
	sensor, err := s.registry.GetSensor(r.Context(), id)
	if errors.Is(err, storage.ErrNotFound) {
		return sensorNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("getting sensor: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, s.renderOne(r.Context(), sensor))
}

// updateSensor handles PATCH /v1/sensors/{id}. A null heartbeat_timeout returns the
// sensor to the fleet-wide timeout; a null open_alert_after turns its alert off.
func (s *Server) updateSensor(w http.ResponseWriter, r *http.Request) error {
	id, err := sensorFromPath(r)
	if err != nil {
		return err
	}
	var req struct {
		Address          optional[string] `json:"address"`
		HeartbeatTimeout optional[string] `json:"heartbeat_timeout"`
		OpenAlertAfter   optional[string] `json:"open_alert_after"`
		Site             optional[string] `json:"site"`
	}
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	var (
		errs   httpapi.FieldErrors
		update registry.SensorUpdate
	)
	switch {
	case req.Address.null:
		errs.Add("address", "must not be null")
	case req.Address.set:
		checkAddress(&errs, req.Address.value)
		update.Address = &req.Address.value
	}
	switch {
	case req.HeartbeatTimeout.null:
		var fleetDefault time.Duration
		update.HeartbeatTimeout = &fleetDefault
	case req.HeartbeatTimeout.set:
		d := parseHeartbeatTimeout(&errs, req.HeartbeatTimeout.value)
		update.HeartbeatTimeout = &d
	}
	switch {
	case req.OpenAlertAfter.null:
		var off time.Duration
		update.OpenAlertAfter = &off
	case req.OpenAlertAfter.set:
		d := parseOpenAlertAfter(&errs, req.OpenAlertAfter.value)
		update.OpenAlertAfter = &d
	}
	switch {
	case req.Site.null:
		none := ""
		update.Site = &none
	case req.Site.set:
		checkSite(&errs, req.Site.value)
		update.Site = &req.Site.value
	}
	if err := errs.Err(); err != nil {
		return err
	}

	updated, err := s.registry.UpdateSensor(r.Context(), id, update)
	if errors.Is(err, storage.ErrNotFound) {
		return sensorNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("updating sensor: %w", err)
	}
	if s.observer != nil {
		if err := s.observer.SensorUpdated(r.Context(), id); err != nil {
			s.logger.WarnContext(r.Context(), "telling observer of sensor update", "sensor", id, "err", err)
		}
	}
	return httpapi.WriteJSON(w, http.StatusOK, s.renderOne(r.Context(), updated))
}

// deleteSensor handles DELETE /v1/sensors/{id}.
func (s *Server) deleteSensor(w http.ResponseWriter, r *http.Request) error {
	id, err := sensorFromPath(r)
	if err != nil {
		return err
	}
	err = s.registry.DeleteSensor(r.Context(), id)
	if errors.Is(err, storage.ErrNotFound) {
		return sensorNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("deleting sensor: %w", err)
	}
	if s.observer != nil {
		if err := s.observer.SensorDeleted(r.Context(), id); err != nil {
			s.logger.WarnContext(r.Context(), "telling observer of sensor deletion", "sensor", id, "err", err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listSensorClients handles GET /v1/sensors/{id}/clients.
func (s *Server) listSensorClients(w http.ResponseWriter, r *http.Request) error {
	id, err := sensorFromPath(r)
	if err != nil {
		return err
	}
	p, err := parsePage(r, validClientID)
	if err != nil {
		return err
	}
	clients, err := s.registry.ListSensorClients(r.Context(), id, storage.Page{After: p.after, Limit: p.limit + 1})
	if errors.Is(err, storage.ErrNotFound) {
		return sensorNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("listing clients of sensor: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, newPageBody(clients, p.limit, clientKey, renderClientWithoutSecret))
}
