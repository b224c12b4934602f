package webapi

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/storage"
)

// IncidentStore keeps incidents and escalation policies (the incident box,
// through incident.APIStore): docs/DESIGN.md "Incidents".
type IncidentStore interface {
	// ListIncidents lists a client's incidents (clientID) or a member's
	// (memberID), in state or any, newest first; ErrNotFound for an unknown
	// client or member.
	ListIncidents(ctx context.Context, clientID, memberID, state string, limit int) ([]domain.Incident, error)
	// GetIncident reads one with its timeline; with memberID, one of the
	// member's client only (ErrNotFound otherwise).
	GetIncident(ctx context.Context, id, memberID string) (domain.Incident, error)
	// ActOnIncident acknowledges ("ack") or resolves ("resolve") it for the
	// member; doing it twice changes nothing.
	ActOnIncident(ctx context.Context, id, memberID, action, channel string, now time.Time) (domain.Incident, error)
	// PeekAckToken says what an ack link's token is (valid, used, expired,
	// unknown) and changes nothing; AckByToken uses it once.
	PeekAckToken(ctx context.Context, token string, now time.Time) (string, error)
	AckByToken(ctx context.Context, token string, now time.Time) (string, domain.Incident, error)
	// EscalationPolicy returns the client's policy and whether it set one.
	EscalationPolicy(ctx context.Context, clientID string) (domain.EscalationPolicy, bool, error)
	// PutEscalationPolicy sets it; the fields naming non-members come back,
	// with nothing set.
	PutEscalationPolicy(ctx context.Context, clientID string, pol domain.EscalationPolicy) ([]domain.FieldError, error)
	DeleteEscalationPolicy(ctx context.Context, clientID string) error
}

// WithIncidents serves the incident and escalation-policy routes and the
// one-click ack page from store. Without it they answer 503.
func WithIncidents(store IncidentStore) Option {
	return func(s *Server) { s.incidents = store }
}

// incidentRoutes declares the incidents' routes.
func (s *Server) incidentRoutes(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(s.bounded)
		r.Use(s.requireToken(bearerAuth{name: "admin", setting: "LOCKSTREAM_ADMIN_TOKEN", realm: "lockstream",
			disabled: "the admin API is disabled: the server has no admin token"}, s.cfg.AdminToken))

		r.Get("/v1/clients/{id}/incidents", s.handle(s.listClientIncidents))
		r.Get("/v1/clients/{id}/escalation-policy", s.handle(s.getEscalationPolicy))
		r.Put("/v1/clients/{id}/escalation-policy", s.handle(s.putEscalationPolicy))
		r.Delete("/v1/clients/{id}/escalation-policy", s.handle(s.deleteEscalationPolicy))
	})
	// A member's incidents: a member token, or the admin token with ?user=.
	r.Group(func(r chi.Router) {
		r.Use(s.bounded)
		r.Use(s.requireMember(true))

		r.Get("/v1/incidents", s.handle(s.listMemberIncidents))
		r.Get("/v1/incidents/{id}", s.handle(s.getIncident))
		r.Post("/v1/incidents/{id}/ack", s.handle(s.actOnIncident("ack")))
		r.Post("/v1/incidents/{id}/resolve", s.handle(s.actOnIncident("resolve")))
	})
	// One-click ack links: the token is the credential.
	r.Group(func(r chi.Router) {
		r.Use(s.bounded)

		r.Get("/ack/{token}", s.handle(s.ackPage))
		r.Post("/ack/{token}", s.handle(s.ackByLink))
	})
}

// incidentBody is an incident in the API.
type incidentBody struct {
	ID              string      `json:"id"`
	ClientID        string      `json:"client_id"`
	Subject         string      `json:"subject"`
	SensorID        string      `json:"sensor_id,omitempty"`
	Site            string      `json:"site,omitempty"`
	State           string      `json:"state"`
	Severity        string      `json:"severity"`
	Type            string      `json:"type"`
	EventID         string      `json:"event_id"`
	OpenedAt        time.Time   `json:"opened_at"`
	Events          int         `json:"events"`
	LastEventAt     time.Time   `json:"last_event_at"`
	AcknowledgedAt  *time.Time  `json:"acknowledged_at"`
	AcknowledgedBy  string      `json:"acknowledged_by,omitempty"`
	ResolvedAt      *time.Time  `json:"resolved_at"`
	ResolvedBy      string      `json:"resolved_by,omitempty"`
	ResolvedEvent   string      `json:"resolved_event,omitempty"`
	DurationSeconds int64       `json:"duration_seconds"`
	Timeline        []entryBody `json:"timeline,omitempty"`
}

type entryBody struct {
	At       time.Time `json:"at"`
	Kind     string    `json:"kind"`
	MemberID string    `json:"member_id,omitempty"`
	Channel  string    `json:"channel,omitempty"`
	Detail   string    `json:"detail,omitempty"`
}

func renderIncident(i domain.Incident, now time.Time) incidentBody {
	b := incidentBody{ID: i.ID, ClientID: i.ClientID, Subject: i.Subject, SensorID: i.SensorID, Site: i.Site,
		State: i.State, Severity: i.Severity, Type: i.Type, EventID: i.EventID, OpenedAt: i.OpenedAt.UTC(),
		Events: i.Events, LastEventAt: i.LastEventAt.UTC(), AcknowledgedAt: i.AcknowledgedAt,
		AcknowledgedBy: i.AcknowledgedBy, ResolvedAt: i.ResolvedAt, ResolvedBy: i.ResolvedBy,
		ResolvedEvent: i.ResolvedEvent, DurationSeconds: int64(i.Duration(now) / time.Second)}
	for _, e := range i.Timeline {
		b.Timeline = append(b.Timeline, entryBody{At: e.At.UTC(), Kind: e.Kind, MemberID: e.MemberID,
			Channel: e.Channel, Detail: e.Detail})
	}
	return b
}

func incidentsDisabled() error {
	return unavailable("incidents are disabled: the server has no incident store")
}

// incidentQuery reads ?state= and ?limit=.
func incidentQuery(r *http.Request) (string, int, error) {
	state := r.URL.Query().Get("state")
	switch state {
	case "", domain.IncidentOpen, domain.IncidentAcknowledged, domain.IncidentResolved:
	default:
		return "", 0, httpapi.InvalidParameter("state must be open, acknowledged or resolved, got %q", state)
	}
	p, err := parsePage(r, func(string) bool { return false })
	return state, p.limit, err
}

func (s *Server) writeIncidents(w http.ResponseWriter, list []domain.Incident) error {
	now := s.cfg.Now()
	items := make([]incidentBody, len(list))
	for i, inc := range list {
		items[i] = renderIncident(inc, now)
	}
	return httpapi.WriteJSON(w, http.StatusOK, pageBody[incidentBody]{Items: items})
}

// listClientIncidents handles GET /v1/clients/{id}/incidents?state=.
func (s *Server) listClientIncidents(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	state, limit, err := incidentQuery(r)
	if err != nil {
		return err
	}
	if s.incidents == nil {
		return incidentsDisabled()
	}
	list, err := s.incidents.ListIncidents(r.Context(), id, "", state, limit)
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	}
	if err != nil {
		return err
	}
	return s.writeIncidents(w, list)
}

// listMemberIncidents handles GET /v1/incidents?state=: the acting member's.
func (s *Server) listMemberIncidents(w http.ResponseWriter, r *http.Request) error {
	state, limit, err := incidentQuery(r)
	if err != nil {
		return err
	}
	if s.incidents == nil {
		return incidentsDisabled()
	}
	list, err := s.incidents.ListIncidents(r.Context(), "", actingMember(r), state, limit)
	if err != nil {
		return err
	}
	return s.writeIncidents(w, list)
}

func incidentFromPath(r *http.Request) (string, error) {
	id := chi.URLParam(r, "id")
	if uuid.Validate(id) != nil {
		return "", httpapi.NotFound("incident %q not found: an incident id is a UUID", id)
	}
	return id, nil
}

// getIncident handles GET /v1/incidents/{id}: with its timeline.
func (s *Server) getIncident(w http.ResponseWriter, r *http.Request) error {
	id, err := incidentFromPath(r)
	if err != nil {
		return err
	}
	if s.incidents == nil {
		return incidentsDisabled()
	}
	inc, err := s.incidents.GetIncident(r.Context(), id, actingMember(r))
	if errors.Is(err, storage.ErrNotFound) {
		return httpapi.NotFound("incident %q not found", id)
	}
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, renderIncident(inc, s.cfg.Now()))
}

// actOnIncident handles POST /v1/incidents/{id}/ack and /resolve: 200 with
// the incident, also when it was acknowledged (or resolved) already.
func (s *Server) actOnIncident(action string) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		id, err := incidentFromPath(r)
		if err != nil {
			return err
		}
		if s.incidents == nil {
			return incidentsDisabled()
		}
		inc, err := s.incidents.ActOnIncident(r.Context(), id, actingMember(r), action, "api", s.cfg.Now())
		if errors.Is(err, storage.ErrNotFound) {
			return httpapi.NotFound("incident %q not found", id)
		}
		if err != nil {
			return err
		}
		return httpapi.WriteJSON(w, http.StatusOK, renderIncident(inc, s.cfg.Now()))
	}
}

// policyRequest is the body of PUT /v1/clients/{id}/escalation-policy, its
// durations as strings so that a bad one is named.
type policyRequest struct {
	Severities  []string `json:"severities"`
	RepeatEvery string   `json:"repeat_every"`
	Loops       int      `json:"loops"`
	Tiers       []struct {
		After   string   `json:"after"`
		Members []string `json:"members"`
	} `json:"tiers"`
}

// policy checks req and returns the policy; the 422 names every bad field.
func (req policyRequest) policy() (domain.EscalationPolicy, error) {
	var errs httpapi.FieldErrors
	duration := func(field, raw string) domain.Duration {
		d, err := time.ParseDuration(raw)
		if err != nil {
			errs.Add(field, "must be a duration such as \"5m\" (from 1s), got %q", raw)
		}
		return domain.Duration(d)
	}
	pol := domain.EscalationPolicy{Severities: req.Severities, Loops: req.Loops,
		RepeatEvery: duration("repeat_every", req.RepeatEvery)}
	for i, t := range req.Tiers {
		after := t.After
		if after == "" {
			after = "0s"
		}
		pol.Tiers = append(pol.Tiers, domain.EscalationTier{After: duration(fmt.Sprintf("tiers[%d].after", i), after),
			Members: t.Members})
	}
	named := map[string]bool{}
	for _, fe := range errs {
		named[fe.Field] = true
	}
	for _, fe := range pol.Check() {
		if !named[fe.Field] {
			errs.Add(fe.Field, "%s", fe.Detail)
		}
	}
	return pol, errs.Err()
}

type policyBody struct {
	domain.EscalationPolicy
	// Default says the client set none: this is the default policy.
	Default bool `json:"default"`
}

// getEscalationPolicy handles GET /v1/clients/{id}/escalation-policy: the
// client's, or the default with "default": true.
func (s *Server) getEscalationPolicy(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	if s.incidents == nil {
		return incidentsDisabled()
	}
	pol, set, err := s.incidents.EscalationPolicy(r.Context(), id)
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	}
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusOK, policyBody{EscalationPolicy: pol, Default: !set})
}

// putEscalationPolicy handles PUT /v1/clients/{id}/escalation-policy: 400
// for a body that is not one, 422 naming each invalid field (tiers' members
// must be the client's).
func (s *Server) putEscalationPolicy(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	var req policyRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	pol, err := req.policy()
	if err != nil {
		return err
	}
	if s.incidents == nil {
		return incidentsDisabled()
	}
	bad, err := s.incidents.PutEscalationPolicy(r.Context(), id, pol)
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	}
	if err != nil {
		return err
	}
	if len(bad) > 0 {
		var errs httpapi.FieldErrors
		for _, fe := range bad {
			errs.Add(fe.Field, "%s", fe.Detail)
		}
		return errs.Err()
	}
	return httpapi.WriteJSON(w, http.StatusOK, policyBody{EscalationPolicy: pol})
}

// deleteEscalationPolicy handles DELETE /v1/clients/{id}/escalation-policy:
// 204; the default applies to incidents opened from then on.
func (s *Server) deleteEscalationPolicy(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	if s.incidents == nil {
		return incidentsDisabled()
	}
	if err := s.incidents.DeleteEscalationPolicy(r.Context(), id); errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	} else if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ackPageTemplate is the one-click ack page: a GET shows it (mail scanners
// follow GETs, so it acknowledges nothing); its button POSTs.
var ackPageTemplate = template.Must(template.New("ack").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="robots" content="noindex">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>lockstream: acknowledge</title></head>
<body style="font-family: sans-serif; max-width: 32em; margin: 3em auto">
<h1>{{.Title}}</h1><p>{{.Text}}</p>
{{if .Button}}<form method="post"><button type="submit" style="font-size: 1.2em; padding: .5em 1.5em">Acknowledge</button></form>{{end}}
</body></html>
`))

type ackPage struct {
	Title, Text string
	Button      bool
}

// ackPageFor says what a token's state means to the person holding the link.
func ackPageFor(state string) (int, ackPage) {
	switch state {
	case "valid":
		return http.StatusOK, ackPage{Title: "Acknowledge the incident?",
			Text: "Acknowledging tells everyone you own it and stops its reminders.", Button: true}
	case "used":
		return http.StatusGone, ackPage{Title: "This link was used already",
			Text: "An ack link works once; the incident was acknowledged with it."}
	case "expired":
		return http.StatusGone, ackPage{Title: "This link has expired",
			Text: "Acknowledge the incident in the app or the console."}
	}
	return http.StatusNotFound, ackPage{Title: "Unknown link", Text: "This ack link is not one lockstream sent."}
}

func writeAckPage(w http.ResponseWriter, status int, page ackPage) error {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	return ackPageTemplate.Execute(w, page)
}

// ackPage handles GET /ack/{token}: the page with its button, or what is
// wrong with the link. It changes nothing.
func (s *Server) ackPage(w http.ResponseWriter, r *http.Request) error {
	if s.incidents == nil {
		return incidentsDisabled()
	}
	state, err := s.incidents.PeekAckToken(r.Context(), chi.URLParam(r, "token"), s.cfg.Now())
	if err != nil {
		return err
	}
	status, page := ackPageFor(state)
	return writeAckPage(w, status, page)
}

// ackByLink handles POST /ack/{token}: acknowledges the incident once.
func (s *Server) ackByLink(w http.ResponseWriter, r *http.Request) error {
	if s.incidents == nil {
		return incidentsDisabled()
	}
	state, inc, err := s.incidents.AckByToken(r.Context(), chi.URLParam(r, "token"), s.cfg.Now())
	if err != nil {
		return err
	}
	if state != "valid" {
		status, page := ackPageFor(state)
		return writeAckPage(w, status, page)
	}
	return writeAckPage(w, http.StatusOK, ackPage{Title: "Acknowledged",
		Text: fmt.Sprintf("The incident (%s of %s) is yours; its reminders stopped.", inc.Type, inc.Subject)})
}
