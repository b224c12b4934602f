package webapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/mail"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/notifier/webhook"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// Limits of a client's fields.
const (
	maxNameLen       = 200
	maxWebhookURLLen = 2048
)

// validClientID reports whether id can be a client id (a UUID).
func validClientID(id string) bool {
	return uuid.Validate(id) == nil
}

// pushTargetBody is a push target as the API shows and accepts it.
type pushTargetBody struct {
	Platform string `json:"platform"`
	PushKey  string `json:"push_key"`
}

// clientBody is a client as the API shows it. Secret is filled only in the answers to
// creation and rotation.
type clientBody struct {
	ID          string           `json:"id"`
	Name        string           `json:"name"`
	WebhookURL  string           `json:"webhook_url"`
	Email       *string          `json:"email"`
	PushTargets []pushTargetBody `json:"push_targets"`
	Secret      string           `json:"secret,omitempty"`
	// EventTypes are the subscribed types; null: every type.
	EventTypes []string `json:"event_types"`
	// RateLimit is the webhook endpoint's deliveries per second; null: none.
	RateLimit *int         `json:"rate_limit"`
	Endpoint  endpointBody `json:"endpoint"`
	// Report is the weekly report's settings.
	Report    reportSettingsBody `json:"report"`
	CreatedAt time.Time          `json:"created_at"`
	UpdatedAt time.Time          `json:"updated_at"`
}

// endpointBody is the state of a client's webhook endpoint.
type endpointBody struct {
	// State is enabled or disabled.
	State        string     `json:"state"`
	DisabledAt   *time.Time `json:"disabled_at"`
	FailingSince *time.Time `json:"failing_since"`
	// Failures counts the failed attempts since the last successful one.
	Failures int `json:"failures"`
}

func renderEndpoint(c registry.Client) endpointBody {
	e := endpointBody{State: "enabled", Failures: c.WebhookFailures}
	if !c.EndpointDisabledAt.IsZero() {
		e.State = "disabled"
		at := c.EndpointDisabledAt.UTC()
		e.DisabledAt = &at
	}
	if !c.WebhookFailingSince.IsZero() {
		at := c.WebhookFailingSince.UTC()
		e.FailingSince = &at
	}
	return e
}

func renderClient(c registry.Client, withSecret bool) clientBody {
	body := clientBody{
		ID:          c.ID,
		Name:        c.Name,
		WebhookURL:  c.WebhookURL,
		PushTargets: make([]pushTargetBody, 0, len(c.PushTargets)),
		EventTypes:  c.EventTypes,
		RateLimit:   nullable(c.RateLimit),
		Endpoint:    renderEndpoint(c),
		Report:      reportSettingsBody{Weekly: c.Report.Weekly, Timezone: c.Report.Timezone},
		CreatedAt:   c.CreatedAt.UTC(),
		UpdatedAt:   c.UpdatedAt.UTC(),
	}
	if c.Email != "" {
		email := c.Email
		body.Email = &email
	}
	for _, t := range c.PushTargets {
		body.PushTargets = append(body.PushTargets, pushTargetBody{Platform: string(t.Platform), PushKey: t.PushKey})
	}
	if withSecret {
		body.Secret = c.Secret
	}
	return body
}

func renderClientWithoutSecret(c registry.Client) clientBody { return renderClient(c, false) }

func clientKey(c registry.Client) string { return c.ID }

func checkName(errs *httpapi.FieldErrors, name string) {
	switch {
	case strings.TrimSpace(name) == "":
		errs.Add("name", "must not be empty")
	case !utf8.ValidString(name):
		errs.Add("name", "must be valid UTF-8")
	case utf8.RuneCountInString(name) > maxNameLen:
		errs.Add("name", "must be at most %d characters", maxNameLen)
	}
}

func checkWebhookURL(errs *httpapi.FieldErrors, raw string) {
	if len(raw) > maxWebhookURLLen {
		errs.Add("webhook_url", "must be at most %d bytes", maxWebhookURLLen)
		return
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		errs.Add("webhook_url", "must be an absolute http or https URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		errs.Add("webhook_url", "must be an absolute http or https URL, got %q", raw)
	case u.Hostname() == "":
		errs.Add("webhook_url", "must name a host, got %q", raw)
	}
}

// checkEmail accepts one bare address (name@example.com): the notifier sends to it as
// is, so display names and lists are refused.
func checkEmail(errs *httpapi.FieldErrors, email string) {
	addr, err := mail.ParseAddress(email)
	switch {
	case err != nil:
		errs.Add("email", "must be an email address such as name@example.com: %v", err)
	case addr.Address != email:
		errs.Add("email", "must be a bare address such as name@example.com, got %q", email)
	}
}

// maxRateLimit bounds a webhook endpoint's rate limit (deliveries per second).
const maxRateLimit = 100000

// checkEventTypes accepts a non-empty list of known event types (event.Types),
// each once.
func checkEventTypes(errs *httpapi.FieldErrors, types []string) {
	if len(types) == 0 {
		errs.Add("event_types", "must name at least one event type (null subscribes to every type)")
		return
	}
	seen := make(map[string]bool, len(types))
	for i, t := range types {
		switch {
		case !slices.Contains(event.Subscribable(), event.Type(t)):
			errs.Add(fmt.Sprintf("event_types[%d]", i), "must be one of %v, got %q", event.Subscribable(), t)
		case seen[t]:
			errs.Add(fmt.Sprintf("event_types[%d]", i), "repeats %q", t)
		}
		seen[t] = true
	}
}

// checkRateLimit accepts 1 to maxRateLimit deliveries per second.
func checkRateLimit(errs *httpapi.FieldErrors, limit int) {
	if limit < 1 || limit > maxRateLimit {
		errs.Add("rate_limit", "must be from 1 to %d deliveries per second (null for none), got %d", maxRateLimit, limit)
	}
}

// pushTargetRequest is a push target in a request; pointers tell missing fields.
type pushTargetRequest struct {
	Platform *string `json:"platform"`
	PushKey  *string `json:"push_key"`
}

func checkPushTargets(errs *httpapi.FieldErrors, reqs []pushTargetRequest) []storage.PushTarget {
	targets := make([]storage.PushTarget, 0, len(reqs))
	for i, req := range reqs {
		field := fmt.Sprintf("push_targets[%d]", i)
		var target storage.PushTarget
		switch {
		case req.Platform == nil:
			errs.Add(field+".platform", "is required")
		case *req.Platform != string(storage.PlatformIOS) && *req.Platform != string(storage.PlatformAndroid):
			errs.Add(field+".platform", "must be IOS or ANDROID, got %q", *req.Platform)
		default:
			target.Platform = storage.Platform(*req.Platform)
		}
		switch {
		case req.PushKey == nil:
			errs.Add(field+".push_key", "is required")
		case strings.TrimSpace(*req.PushKey) == "":
			errs.Add(field+".push_key", "must not be empty")
		default:
			target.PushKey = *req.PushKey
		}
		targets = append(targets, target)
	}
	return targets
}

// clientFromPath returns the {id} of the route, or a 404 when it cannot name a client.
func clientFromPath(r *http.Request) (string, error) {
	id := chi.URLParam(r, "id")
	if !validClientID(id) {
		return "", httpapi.NotFound("client %q not found: a client id is a UUID", id)
	}
	return id, nil
}

func clientNotFound(id string) error {
	return httpapi.NotFound("client %q not found", id)
}

func clientLocation(id string) string {
	return "/v1/clients/" + url.PathEscape(id)
}

// createClient handles POST /v1/clients. The answer is the only one, with rotation's,
// that shows the signing secret.
func (s *Server) createClient(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Name        *string             `json:"name"`
		WebhookURL  *string             `json:"webhook_url"`
		Email       *string             `json:"email"`
		PushTargets []pushTargetRequest `json:"push_targets"`
		EventTypes  optional[[]string]  `json:"event_types"`
		RateLimit   optional[int]       `json:"rate_limit"`
	}
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	var (
		errs   httpapi.FieldErrors
		client registry.Client
	)
	if req.EventTypes.set && !req.EventTypes.null {
		checkEventTypes(&errs, req.EventTypes.value)
		client.EventTypes = req.EventTypes.value
	}
	if req.RateLimit.set && !req.RateLimit.null {
		checkRateLimit(&errs, req.RateLimit.value)
		client.RateLimit = req.RateLimit.value
	}
	if req.Name == nil {
		errs.Add("name", "is required")
	} else {
		checkName(&errs, *req.Name)
		client.Name = *req.Name
	}
	if req.WebhookURL == nil {
		errs.Add("webhook_url", "is required")
	} else {
		checkWebhookURL(&errs, *req.WebhookURL)
		client.WebhookURL = *req.WebhookURL
	}
	if req.Email != nil && *req.Email != "" {
		checkEmail(&errs, *req.Email)
		client.Email = *req.Email
	}
	client.PushTargets = checkPushTargets(&errs, req.PushTargets)
	if err := errs.Err(); err != nil {
		return err
	}

	secret := webhook.NewSecret()
	client.Secret = secret
	created, err := s.registry.CreateClient(r.Context(), client)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	w.Header().Set("Location", clientLocation(created.ID))
	return httpapi.WriteJSON(w, http.StatusCreated, renderClient(created, true))
}

// listClients handles GET /v1/clients.
func (s *Server) listClients(w http.ResponseWriter, r *http.Request) error {
	p, err := parsePage(r, validClientID)
	if err != nil {
		return err
	}
	clients, err := s.registry.ListClients(r.Context(), storage.Page{After: p.after, Limit: p.limit + 1})
	if err != nil {
		return fmt.Errorf("listing clients: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, newPageBody(clients, p.limit, clientKey, renderClientWithoutSecret))
}

// getClient handles GET /v1/clients/{id}.
func (s *Server) getClient(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	client, err := s.registry.GetClient(r.Context(), id)
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("getting client: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, renderClient(client, false))
}

// reportSettingsBody is a client's weekly report settings as the API shows them.
type reportSettingsBody struct {
	Weekly   bool   `json:"weekly"`
	Timezone string `json:"timezone"`
}

// reportSettingsRequest is PATCH's report: each field left out stays as it is.
type reportSettingsRequest struct {
	Weekly   optional[bool]   `json:"weekly"`
	Timezone optional[string] `json:"timezone"`
}

// checkReportSettings checks PATCH's report and copies it into update.
func checkReportSettings(errs *httpapi.FieldErrors, req optional[reportSettingsRequest], update *registry.ClientUpdate) {
	if !req.set {
		return
	}
	if req.null {
		errs.Add("report", "must not be null: send {\"weekly\": false} to stop the weekly report")
		return
	}
	switch w := req.value.Weekly; {
	case w.null:
		errs.Add("report.weekly", "must be true or false")
	case w.set:
		update.ReportWeekly = &w.value
	}
	switch tz := req.value.Timezone; {
	case tz.null:
		errs.Add("report.timezone", "must not be null: an IANA time zone such as Europe/Paris")
	case tz.set:
		// "Local" is the server's zone, and "" UTC to LoadLocation: neither names a zone.
		if _, err := time.LoadLocation(tz.value); err != nil || tz.value == "" || tz.value == "Local" {
			errs.Add("report.timezone", "must be an IANA time zone such as Europe/Paris, got %q", tz.value)
			return
		}
		update.ReportTimezone = &tz.value
	}
}

// updateClient handles PATCH /v1/clients/{id}. email null or "" removes the address;
// push_targets replaces them all (null or [] removes them all); report sets the
// weekly report (weekly, timezone), each field left out kept.
func (s *Server) updateClient(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	var req struct {
		Name        optional[string]                `json:"name"`
		WebhookURL  optional[string]                `json:"webhook_url"`
		Email       optional[string]                `json:"email"`
		PushTargets optional[[]pushTargetRequest]   `json:"push_targets"`
		EventTypes  optional[[]string]              `json:"event_types"`
		RateLimit   optional[int]                   `json:"rate_limit"`
		Report      optional[reportSettingsRequest] `json:"report"`
	}
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	var (
		errs   httpapi.FieldErrors
		update registry.ClientUpdate
	)
	switch {
	case req.Name.null:
		errs.Add("name", "must not be null")
	case req.Name.set:
		checkName(&errs, req.Name.value)
		update.Name = &req.Name.value
	}
	switch {
	case req.WebhookURL.null:
		errs.Add("webhook_url", "must not be null")
	case req.WebhookURL.set:
		checkWebhookURL(&errs, req.WebhookURL.value)
		update.WebhookURL = &req.WebhookURL.value
	}
	if req.Email.set {
		email := req.Email.value // "" when null: both remove the address.
		if email != "" {
			checkEmail(&errs, email)
		}
		update.Email = &email
	}
	if req.PushTargets.set {
		targets := checkPushTargets(&errs, req.PushTargets.value)
		update.PushTargets = &targets
	}
	if req.EventTypes.set {
		types := req.EventTypes.value // nil when null: every type
		if !req.EventTypes.null {
			checkEventTypes(&errs, types)
		}
		update.EventTypes = &types
	}
	if req.RateLimit.set {
		limit := req.RateLimit.value // 0 when null: no limit
		if !req.RateLimit.null {
			checkRateLimit(&errs, limit)
		}
		update.RateLimit = &limit
	}
	checkReportSettings(&errs, req.Report, &update)
	if err := errs.Err(); err != nil {
		return err
	}

	updated, err := s.registry.UpdateClient(r.Context(), id, update)
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("updating client: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, renderClient(updated, false))
}

// deleteClient handles DELETE /v1/clients/{id}.
func (s *Server) deleteClient(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	err = s.registry.DeleteClient(r.Context(), id)
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("deleting client: %w", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// rotateClientSecret handles POST /v1/clients/{id}/secret: a new signing secret,
// shown in the answer, replaces the old one, which keeps signing webhooks
// alongside it for SecretOverlap (so attempts already under way still verify).
func (s *Server) rotateClientSecret(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	secret := webhook.NewSecret()
	client, err := s.registry.RotateClientSecret(r.Context(), id, secret, s.cfg.Now().Add(s.cfg.SecretOverlap))
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("rotating client secret: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, renderClient(client, true))
}

// listClientSensors handles GET /v1/clients/{id}/sensors.
func (s *Server) listClientSensors(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	p, err := parsePage(r, validSensorID)
	if err != nil {
		return err
	}
	sensors, err := s.registry.ListClientSensors(r.Context(), id, storage.Page{After: p.after, Limit: p.limit + 1})
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("listing sensors of client: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, s.sensorPage(r.Context(), sensors, p.limit))
}
