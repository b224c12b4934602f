package webapi

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// MemberStore is the part of registry.Store the member routes and member
// authentication use.
type MemberStore interface {
	CreateMember(ctx context.Context, m registry.Member, tokenHash []byte, backfill registry.Backfill) (registry.Member, int, error)
	GetMember(ctx context.Context, id string) (registry.Member, error)
	MemberByTokenHash(ctx context.Context, hash []byte, idle time.Duration) (registry.Member, error)
	MemberByUser(ctx context.Context, user string) (registry.Member, error)
	ListClientMembers(ctx context.Context, clientID string, page storage.Page) ([]registry.Member, error)
	UpdateMember(ctx context.Context, id string, u registry.MemberUpdate) (registry.Member, error)
	RotateMemberToken(ctx context.Context, id string, tokenHash []byte) (registry.Member, error)
	DeleteMember(ctx context.Context, id string) error
}

// memberTokenPrefix starts every member token, so that one is recognised on
// sight (in a log, a leaked file) and told apart from the admin token.
const memberTokenPrefix = "lsm_"

// newMemberToken returns a fresh member token, lsm_ and 32 random bytes in
// base64url, and the hash stored in its place. An unsalted SHA-256 is enough:
// the token is 256 random bits, so no dictionary or brute force applies.
func newMemberToken() (token string, hash []byte) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	token = memberTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return token, hashMemberToken(token)
}

func hashMemberToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// memberBody is a member as the API shows it. Token is filled only in the answers
// to creation and rotation.
type memberBody struct {
	ID          string           `json:"id"`
	ClientID    string           `json:"client_id"`
	Name        string           `json:"name"`
	Username    *string          `json:"username"`
	Email       *string          `json:"email"`
	Timezone    string           `json:"timezone"`
	Preferences preferencesBody  `json:"preferences"`
	Routing     routingBody      `json:"routing"`
	QuietHours  *quietHoursBody  `json:"quiet_hours"`
	PushTargets []pushTargetBody `json:"push_targets"`
	Token       string           `json:"token,omitempty"`
	Backfilled  *int             `json:"backfilled,omitempty"`
	CreatedAt   time.Time        `json:"created_at"`
	UpdatedAt   time.Time        `json:"updated_at"`
}

// preferencesBody is a member's preferences as the API shows them.
type preferencesBody struct {
	Email       string   `json:"email"`
	Push        bool     `json:"push"`
	DigestTimes []string `json:"digest_times"`
}

// routingBody is what a member hears of (DESIGN.md "Routing per member"):
// sites and sensors null for every one. It is also the routing object of
// PATCH /v1/members/{id}, which replaces the routing whole: a field left out
// takes its default.
type routingBody struct {
	Sites       []string `json:"sites"`
	Sensors     []string `json:"sensors"`
	MinSeverity string   `json:"min_severity"`
}

// quietHoursBody is a member's quiet hours (DESIGN.md "Quiet hours"): HH:MM
// in its timezone; from after to spans midnight.
type quietHoursBody struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// checkQuietHours validates quiet hours.
func checkQuietHours(errs *httpapi.FieldErrors, q quietHoursBody) domain.QuietHours {
	if !digestTime.MatchString(q.From) {
		errs.Add("quiet_hours.from", "must be a time HH:MM on 24 hours, got %q", q.From)
	}
	if !digestTime.MatchString(q.To) {
		errs.Add("quiet_hours.to", "must be a time HH:MM on 24 hours, got %q", q.To)
	} else if q.To == q.From {
		errs.Add("quiet_hours.to", "must differ from from (%s)", q.From)
	}
	return domain.QuietHours{From: q.From, To: q.To}
}

// maxRouted bounds the sites and the sensors a routing names.
const maxRouted = 1000

// checkRouting validates a routing request into the member's routing.
func checkRouting(errs *httpapi.FieldErrors, req routingBody) registry.MemberRouting {
	list := func(field string, names []string) {
		if len(names) > maxRouted {
			errs.Add("routing."+field, "at most %d entries", maxRouted)
		}
		for i, n := range names {
			if strings.TrimSpace(n) == "" || len(n) > 200 {
				errs.Add(fmt.Sprintf("routing.%s[%d]", field, i), "must be a %s name of 1 to 200 bytes, got %q",
					strings.TrimSuffix(field, "s"), n)
			}
		}
	}
	list("sites", req.Sites)
	list("sensors", req.Sensors)
	switch req.MinSeverity {
	case "", "info", "warning", "critical":
	default:
		errs.Add("routing.min_severity", "must be info, warning or critical, got %q", req.MinSeverity)
	}
	return registry.MemberRouting{Sites: req.Sites, Sensors: req.Sensors, MinSeverity: cmp.Or(req.MinSeverity, "info")}
}

func renderMember(m registry.Member) memberBody {
	body := memberBody{
		ID:       m.ID,
		ClientID: m.ClientID,
		Name:     m.Name,
		Timezone: m.Timezone,
		Preferences: preferencesBody{Email: string(m.Preferences.Email), Push: m.Preferences.Push,
			DigestTimes: m.Preferences.DigestTimes},
		Routing: routingBody{Sites: m.Routing.Sites, Sensors: m.Routing.Sensors,
			MinSeverity: cmp.Or(m.Routing.MinSeverity, "info")},
		PushTargets: make([]pushTargetBody, 0, len(m.PushTargets)),
		CreatedAt:   m.CreatedAt.UTC(),
		UpdatedAt:   m.UpdatedAt.UTC(),
	}
	if m.QuietHours != nil {
		body.QuietHours = &quietHoursBody{From: m.QuietHours.From, To: m.QuietHours.To}
	}
	if body.Preferences.DigestTimes == nil {
		body.Preferences.DigestTimes = []string{}
	}
	if m.Email != "" {
		email := m.Email
		body.Email = &email
	}
	if m.Username != "" {
		username := m.Username
		body.Username = &username
	}
	for _, t := range m.PushTargets {
		body.PushTargets = append(body.PushTargets, pushTargetBody{Platform: string(t.Platform), PushKey: t.PushKey})
	}
	return body
}

func memberKey(m registry.Member) string { return m.ID }

// maxDigestTimes bounds a member's digest times: more than one an hour is not a
// digest.
const maxDigestTimes = 24

// digestTime is a wall-clock time, HH:MM on 24 hours.
var digestTime = regexp.MustCompile(`^([01][0-9]|2[0-3]):[0-5][0-9]$`)

// preferencesRequest is the preferences object of a request; pointers tell
// missing fields, which keep their current (or default) value.
type preferencesRequest struct {
	Email       *string  `json:"email"`
	Push        *bool    `json:"push"`
	DigestTimes []string `json:"digest_times"`
}

// checkPreferences validates req and applies it over base.
func checkPreferences(errs *httpapi.FieldErrors, req *preferencesRequest, base registry.MemberPreferences) registry.MemberPreferences {
	prefs := base
	if req == nil {
		return prefs
	}
	if req.Email != nil {
		if p := registry.EmailPreference(*req.Email); p.Valid() {
			prefs.Email = p
		} else {
			errs.Add("preferences.email", "must be off, once_per_unread or digest, got %q", *req.Email)
		}
	}
	if req.Push != nil {
		prefs.Push = *req.Push
	}
	if req.DigestTimes != nil {
		if len(req.DigestTimes) > maxDigestTimes {
			errs.Add("preferences.digest_times", "at most %d times", maxDigestTimes)
		}
		seen := map[string]bool{}
		times := make([]string, 0, len(req.DigestTimes))
		for i, d := range req.DigestTimes {
			switch {
			case !digestTime.MatchString(d):
				errs.Add(fmt.Sprintf("preferences.digest_times[%d]", i), "must be a time HH:MM on 24 hours, got %q", d)
			case seen[d]:
				errs.Add(fmt.Sprintf("preferences.digest_times[%d]", i), "%s is given twice", d)
			default:
				seen[d] = true
				times = append(times, d)
			}
		}
		prefs.DigestTimes = times
	}
	return prefs
}

// checkTimezone accepts an IANA time zone name that this machine knows.
func checkTimezone(errs *httpapi.FieldErrors, tz string) {
	// LoadLocation also accepts "" and "Local", which name no zone a member lives in.
	if tz == "" || tz == "Local" {
		errs.Add("timezone", "must be an IANA time zone name such as Europe/Paris or UTC, got %q", tz)
		return
	}
	if _, err := time.LoadLocation(tz); err != nil {
		errs.Add("timezone", "must be an IANA time zone name such as Europe/Paris or UTC: %v", err)
	}
}

// memberFromPath returns the {id} of the route, or a 404 when it cannot name a
// member.
func memberFromPath(r *http.Request) (string, error) {
	id := chi.URLParam(r, "id")
	if uuid.Validate(id) != nil {
		return "", httpapi.NotFound("member %q not found: a member id is a UUID", id)
	}
	return id, nil
}

func memberNotFound(id string) error {
	return httpapi.NotFound("member %q not found", id)
}

// membersDisabled is the 503 of the member and inbox routes on a server built
// without them (see WithInbox).
func membersDisabled() error {
	return unavailable("members and their inboxes are disabled: the server has no member store")
}

// createMember handles POST /v1/clients/{id}/members. The answer is the only one,
// with rotation's, that shows the member's token.
func (s *Server) createMember(w http.ResponseWriter, r *http.Request) error {
	if s.members == nil {
		return membersDisabled()
	}
	clientID, err := clientFromPath(r)
	if err != nil {
		return err
	}
	var req struct {
		Name        *string             `json:"name"`
		Username    *string             `json:"username"`
		Email       *string             `json:"email"`
		PushTargets []pushTargetRequest `json:"push_targets"`
		Timezone    *string             `json:"timezone"`
		Preferences *preferencesRequest `json:"preferences"`
	}
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	var errs httpapi.FieldErrors
	m := registry.Member{ClientID: clientID, Timezone: "UTC"}
	if req.Name == nil {
		errs.Add("name", "is required")
	} else {
		checkName(&errs, *req.Name)
		m.Name = *req.Name
	}
	if req.Email != nil && *req.Email != "" {
		checkEmail(&errs, *req.Email)
		m.Email = *req.Email
	}
	if req.Username != nil {
		checkUsername(&errs, *req.Username)
		m.Username = *req.Username
	}
	if req.Timezone != nil {
		checkTimezone(&errs, *req.Timezone)
		m.Timezone = *req.Timezone
	}
	m.Preferences = checkPreferences(&errs, req.Preferences, registry.DefaultMemberPreferences())
	m.PushTargets = checkPushTargets(&errs, req.PushTargets)
	if err := errs.Err(); err != nil {
		return err
	}

	token, hash := newMemberToken()
	created, backfilled, err := s.members.CreateMember(r.Context(), m, hash,
		registry.Backfill{Window: s.inboxCfg.NewMemberWindow, Max: NewMemberMaxMessages})
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(clientID)
	}
	if errors.Is(err, storage.ErrConflict) {
		return usernameTaken(m.Username)
	}
	if err != nil {
		return fmt.Errorf("creating member: %w", err)
	}
	body := renderMember(created)
	body.Token = token
	body.Backfilled = &backfilled
	w.Header().Set("Location", "/v1/members/"+url.PathEscape(created.ID))
	return httpapi.WriteJSON(w, http.StatusCreated, body)
}

// listClientMembers handles GET /v1/clients/{id}/members.
func (s *Server) listClientMembers(w http.ResponseWriter, r *http.Request) error {
	if s.members == nil {
		return membersDisabled()
	}
	clientID, err := clientFromPath(r)
	if err != nil {
		return err
	}
	p, err := parsePage(r, func(key string) bool { return uuid.Validate(key) == nil })
	if err != nil {
		return err
	}
	members, err := s.members.ListClientMembers(r.Context(), clientID, storage.Page{After: p.after, Limit: p.limit + 1})
	if errors.Is(err, storage.ErrNotFound) {
		return clientNotFound(clientID)
	}
	if err != nil {
		return fmt.Errorf("listing members: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, newPageBody(members, p.limit, memberKey, renderMember))
}

// getMember handles GET /v1/members/{id}.
func (s *Server) getMember(w http.ResponseWriter, r *http.Request) error {
	if s.members == nil {
		return membersDisabled()
	}
	id, err := memberFromPath(r)
	if err != nil {
		return err
	}
	m, err := s.members.GetMember(r.Context(), id)
	if errors.Is(err, storage.ErrNotFound) {
		return memberNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("getting member: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, renderMember(m))
}

// updateMember handles PATCH /v1/members/{id}. email null or "" removes the
// address; push_targets replaces them all; preferences changes the fields given.
func (s *Server) updateMember(w http.ResponseWriter, r *http.Request) error {
	if s.members == nil {
		return membersDisabled()
	}
	id, err := memberFromPath(r)
	if err != nil {
		return err
	}
	var req struct {
		Name        optional[string]              `json:"name"`
		Username    optional[string]              `json:"username"`
		Email       optional[string]              `json:"email"`
		Timezone    optional[string]              `json:"timezone"`
		Preferences optional[preferencesRequest]  `json:"preferences"`
		PushTargets optional[[]pushTargetRequest] `json:"push_targets"`
		Routing     optional[routingBody]         `json:"routing"`
		QuietHours  optional[quietHoursBody]      `json:"quiet_hours"`
	}
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	current, err := s.members.GetMember(r.Context(), id)
	if errors.Is(err, storage.ErrNotFound) {
		return memberNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("getting member: %w", err)
	}
	update, err := memberUpdate(current, req.Name, req.Email, req.Timezone, req.Preferences, req.PushTargets)
	if err != nil {
		return err
	}
	if update.Username, err = usernameUpdate(req.Username); err != nil {
		return err
	}
	if req.Routing.set {
		// null: back to the default, everything.
		var errs httpapi.FieldErrors
		routing := checkRouting(&errs, req.Routing.value)
		if err := errs.Err(); err != nil {
			return err
		}
		update.Routing = &routing
	}
	if req.QuietHours.set {
		// null removes them.
		quiet := domain.QuietHours{}
		if !req.QuietHours.null {
			var errs httpapi.FieldErrors
			quiet = checkQuietHours(&errs, req.QuietHours.value)
			if err := errs.Err(); err != nil {
				return err
			}
		}
		update.QuietHours = &quiet
	}
	updated, err := s.members.UpdateMember(r.Context(), id, update)
	if errors.Is(err, storage.ErrNotFound) {
		return memberNotFound(id)
	}
	if errors.Is(err, storage.ErrConflict) {
		return usernameTaken(*update.Username)
	}
	if err != nil {
		return fmt.Errorf("updating member: %w", err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, renderMember(updated))
}

// usernameUpdate validates a PATCH's username: null or "" removes it.
func usernameUpdate(username optional[string]) (*string, error) {
	if !username.set {
		return nil, nil
	}
	var errs httpapi.FieldErrors
	if username.value != "" {
		checkUsername(&errs, username.value)
	}
	return &username.value, errs.Err()
}

// maxUsernameLen bounds a username, in bytes.
const maxUsernameLen = 64

// usernameRE is a username: what CyVerse's short usernames are made of.
var usernameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]*$`)

// checkUsername accepts a username that cannot be taken for a member id: the
// v1 API's ?user= takes either.
func checkUsername(errs *httpapi.FieldErrors, username string) {
	switch {
	case len(username) > maxUsernameLen || !usernameRE.MatchString(username):
		errs.Add("username", "must be 1 to %d letters, digits, '.', '_', '@' or '-', starting with a letter or digit, got %q",
			maxUsernameLen, username)
	case uuid.Validate(username) == nil:
		errs.Add("username", "must not be a UUID: ?user= of the v1 API takes a username or a member id, got %q", username)
	}
}

// usernameTaken is the 409 of a username another member has.
func usernameTaken(username string) error {
	return httpapi.Conflict("username %q is taken by another member (usernames are unique across clients)", username)
}

// memberUpdate validates a PATCH of current into an update, or a 422.
func memberUpdate(current registry.Member, name, email, tz optional[string], prefs optional[preferencesRequest],
	targets optional[[]pushTargetRequest]) (registry.MemberUpdate, error) {
	var (
		errs   httpapi.FieldErrors
		update registry.MemberUpdate
	)
	switch {
	case name.null:
		errs.Add("name", "must not be null")
	case name.set:
		checkName(&errs, name.value)
		update.Name = &name.value
	}
	if email.set {
		address := email.value // "" when null: both remove the address.
		if address != "" {
			checkEmail(&errs, address)
		}
		update.Email = &address
	}
	switch {
	case tz.null:
		errs.Add("timezone", "must not be null")
	case tz.set:
		checkTimezone(&errs, tz.value)
		update.Timezone = &tz.value
	}
	switch {
	case prefs.null:
		errs.Add("preferences", "must not be null")
	case prefs.set:
		p := checkPreferences(&errs, &prefs.value, current.Preferences)
		update.Preferences = &p
	}
	if targets.set {
		t := checkPushTargets(&errs, targets.value)
		update.PushTargets = &t
	}
	return update, errs.Err()
}

// deleteMember handles DELETE /v1/members/{id}: the member, its token and its
// inbox go.
func (s *Server) deleteMember(w http.ResponseWriter, r *http.Request) error {
	if s.members == nil {
		return membersDisabled()
	}
	id, err := memberFromPath(r)
	if err != nil {
		return err
	}
	err = s.members.DeleteMember(r.Context(), id)
	if errors.Is(err, storage.ErrNotFound) {
		return memberNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("deleting member: %w", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// rotateMemberToken handles POST /v1/members/{id}/token: a new token, shown in
// the answer, replaces the old one, which stops working at once.
func (s *Server) rotateMemberToken(w http.ResponseWriter, r *http.Request) error {
	if s.members == nil {
		return membersDisabled()
	}
	id, err := memberFromPath(r)
	if err != nil {
		return err
	}
	token, hash := newMemberToken()
	m, err := s.members.RotateMemberToken(r.Context(), id, hash)
	if errors.Is(err, storage.ErrNotFound) {
		return memberNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("rotating member token: %w", err)
	}
	body := renderMember(m)
	body.Token = token
	return httpapi.WriteJSON(w, http.StatusOK, body)
}

// isAdminToken reports whether token is the admin token, comparing hashes in
// constant time so that neither content nor length leaks through timing.
func (s *Server) isAdminToken(token string) bool {
	got := sha256.Sum256([]byte(token))
	want := sha256.Sum256([]byte(s.cfg.AdminToken))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// memberContextKey carries the member a request acts for.
type memberContextKey struct{}

// actingMember returns the member the request acts for, set by requireMember.
func actingMember(r *http.Request) string {
	id, _ := r.Context().Value(memberContextKey{}).(string)
	return id
}

// requireMember lets through requests bearing a member token, acting for that
// member, and requests bearing the admin token with ?user=<member id>, acting
// for that member. A member token with ?user= is refused: a member acts for
// itself only, and its URLs carry no member id. With adminAllowed false, only a
// member token passes.
func (s *Server) requireMember(adminAllowed bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return s.handle(func(w http.ResponseWriter, r *http.Request) error {
			if s.members == nil {
				return membersDisabled()
			}
			token, ok := bearerToken(r)
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="lockstream"`)
				return httpapi.NewProblem(http.StatusUnauthorized, httpapi.ProblemUnauthorized,
					"this route needs an Authorization: Bearer <member token> header")
			}
			user, hasUser := r.URL.Query()["user"]
			var member string
			switch {
			case strings.HasPrefix(token, memberTokenPrefix):
				if hasUser {
					return httpapi.InvalidParameter("user is for the admin token only: a member token acts for its member")
				}
				m, err := s.members.MemberByTokenHash(r.Context(), hashMemberToken(token), s.inboxCfg.MemberTokenIdle)
				if errors.Is(err, storage.ErrNotFound) {
					w.Header().Set("WWW-Authenticate", `Bearer realm="lockstream", error="invalid_token"`)
					return httpapi.NewProblem(http.StatusUnauthorized, httpapi.ProblemUnauthorized, "the member token is not valid")
				}
				if errors.Is(err, registry.ErrTokenIdle) {
					w.Header().Set("WWW-Authenticate", `Bearer realm="lockstream", error="invalid_token", error_description="token idle"`)
					return httpapi.NewProblem(http.StatusUnauthorized, httpapi.ProblemUnauthorized,
						"the member token went unused for %s (LOCKSTREAM_MEMBER_TOKEN_IDLE) and no longer works: "+
							"an admin issues a new one with POST /v1/members/%s/token", formatDays(s.inboxCfg.MemberTokenIdle), m.ID)
				}
				if err != nil {
					return fmt.Errorf("authenticating a member: %w", err)
				}
				member = m.ID
			case adminAllowed && s.isAdminToken(token):
				if !hasUser || len(user) != 1 || user[0] == "" {
					return httpapi.InvalidParameter("the admin token acts for a member: add ?user=<member id>")
				}
				if _, err := s.members.GetMember(r.Context(), user[0]); errors.Is(err, storage.ErrNotFound) {
					return memberNotFound(user[0])
				} else if err != nil {
					return fmt.Errorf("finding member %s: %w", user[0], err)
				}
				member = user[0]
			default:
				w.Header().Set("WWW-Authenticate", `Bearer realm="lockstream", error="invalid_token"`)
				return httpapi.NewProblem(http.StatusUnauthorized, httpapi.ProblemUnauthorized, "the bearer token is not a member token")
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), memberContextKey{}, member)))
			return nil
		})
	}
}

// formatDays writes d as a number of days ("60d") when it is whole days, as
// LOCKSTREAM_MEMBER_TOKEN_IDLE is usually given, else as a Go duration.
func formatDays(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}
