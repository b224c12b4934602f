package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// cookieName is the session cookie. Its value is 32 random bytes; Redis keeps the
// session under their SHA-256, so reading Redis gives no usable cookie.
const cookieName = "lockstream_console"

// Roles a session may have. A member session carries the member id as its
// subject and sees only its own inbox: page handlers are registered with the
// roles they admit.
const (
	roleAdmin  = "admin"
	roleMember = "member"
)

// session is the signed-in user of a request.
type session struct {
	StoredSession
	key string
}

// CSRFToken is the token the session's forms carry.
func (s *session) CSRFToken() string { return s.CSRF }

// randomToken returns n random bytes, base64url.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sessionKey is the Redis key part of a cookie value.
func sessionKey(cookie string) string {
	sum := sha256.Sum256([]byte(cookie))
	return hex.EncodeToString(sum[:])
}

// currentSession returns the request's live session, or nil. A session whose
// credential no longer matches (the admin token was rotated) is ended.
func (c *Console) currentSession(r *http.Request) (*session, error) {
	cookie, err := r.Cookie(cookieName)
	if err != nil || len(cookie.Value) < 40 {
		return nil, nil
	}
	key := sessionKey(cookie.Value)
	stored, err := c.deps.Sessions.ConsoleSession(r.Context(), key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	want, err := c.sessionCredential(r.Context(), stored)
	if err != nil {
		return nil, err
	}
	if want == "" || subtle.ConstantTimeCompare([]byte(stored.Credential), []byte(want)) != 1 {
		// The admin token was rotated, the member's token rotated or the member
		// deleted: the session ends.
		if err := c.deps.Sessions.DeleteConsoleSession(r.Context(), key); err != nil {
			return nil, err
		}
		return nil, nil
	}
	return &session{StoredSession: stored, key: key}, nil
}

// sessionCredential is the credential a live session of stored's role and
// subject must carry now; empty when no session of that kind can be live.
func (c *Console) sessionCredential(ctx context.Context, stored StoredSession) (string, error) {
	switch {
	case stored.Role == roleAdmin:
		return c.adminCredential, nil
	case stored.Role == roleMember && c.deps.Members != nil:
		hash, err := c.deps.Members.MemberTokenHash(ctx, stored.Subject)
		if errors.Is(err, storage.ErrNotFound) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return memberCredential(hash), nil
	}
	return "", nil
}

// memberCredential fingerprints a member's token hash for its sessions.
func memberCredential(tokenHash []byte) string {
	return credential("member", hex.EncodeToString(tokenHash))
}

// secureRequest reports whether the browser reached us over TLS (directly or
// through a proxy that says so), so the cookie can be marked Secure.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: value, Path: "/console", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secureRequest(r),
	})
}

// sameOrigin refuses requests another site made the browser send: the Fetch
// Metadata header when the browser sends it, else Origin. A request with neither
// comes from no browser, and carries no ambient cookie worth forging.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none"
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		return err == nil && u.Host == r.Host
	}
	return true
}

// loginPage shows the sign-in form.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	flash := ""
	if r.URL.Query().Has("signed_out") {
		flash = "You are signed out."
	}
	c.render(w, r, http.StatusOK, "login", view{Title: "Sign in", Flash: flash, Data: loginData{Next: safeNext(r.URL.Query().Get("next"))}})
}

type loginData struct {
	Next  string
	Error string
}

// safeNext keeps a post-sign-in target only when it is a console path, so the form
// cannot be used to send someone elsewhere.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/console/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/console/"
	}
	return next
}

// login checks the token and starts a session.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		c.fail(w, r, nil, errorf(http.StatusForbidden, "This form must be sent from the console itself."))
		return
	}
	next := safeNext(r.PostFormValue("next"))
	token := strings.TrimSpace(r.PostFormValue("token"))
	s, err := c.signIn(r.Context(), token)
	if err != nil {
		c.fail(w, r, nil, err)
		return
	}
	if s.Role == "" {
		c.logger.InfoContext(r.Context(), "console: sign-in refused", "remote", r.RemoteAddr)
		c.render(w, r, http.StatusUnauthorized, "login", view{Title: "Sign in",
			Data: loginData{Next: next, Error: "That token is not valid."}})
		return
	}
	cookie := randomToken(32)
	s.CSRF, s.CreatedAt = randomToken(24), c.cfg.Now().UTC()
	if err := c.deps.Sessions.CreateConsoleSession(r.Context(), sessionKey(cookie), s, c.cfg.SessionTTL); err != nil {
		c.fail(w, r, nil, err)
		return
	}
	c.setCookie(w, r, cookie, int(c.cfg.SessionTTL/time.Second))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// signIn returns the session a token opens: the admin's, a member's, or one
// with no role when the token opens none.
func (c *Console) signIn(ctx context.Context, token string) (StoredSession, error) {
	if token == "" {
		return StoredSession{}, nil
	}
	got, want := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(c.cfg.AdminToken))
	if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
		return StoredSession{Role: roleAdmin, Credential: c.adminCredential}, nil
	}
	if c.deps.Members == nil || !strings.HasPrefix(token, "lsm_") {
		return StoredSession{}, nil
	}
	// A member token is stored as its SHA-256, as the API looks it up.
	m, err := c.deps.Members.MemberByTokenHash(ctx, got[:], c.cfg.MemberTokenIdle)
	if errors.Is(err, storage.ErrNotFound) || errors.Is(err, registry.ErrTokenIdle) {
		return StoredSession{}, nil
	}
	if err != nil {
		return StoredSession{}, err
	}
	return StoredSession{Role: roleMember, Subject: m.ID, Credential: memberCredential(got[:])}, nil
}

// logout ends the session, in Redis and in the browser.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *session) error {
	if err := c.deps.Sessions.DeleteConsoleSession(r.Context(), s.key); err != nil {
		return err
	}
	c.setCookie(w, r, "", -1)
	http.Redirect(w, r, "/console/login?signed_out=1", http.StatusSeeOther)
	return nil
}

// handlerFunc is a page handler of a signed-in session; an error it returns is
// rendered by fail.
type handlerFunc func(w http.ResponseWriter, r *http.Request, s *session) error

// page wraps h for the roles it admits: without a session a GET goes to sign-in and
// anything else is refused; a POST must come from the console (same origin) and
// carry the session's CSRF token.
func (c *Console) page(roles []string, h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := c.currentSession(r)
		if err != nil {
			c.fail(w, r, nil, err)
			return
		}
		if s == nil {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/console/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			c.fail(w, r, nil, errorf(http.StatusUnauthorized, "Sign in first."))
			return
		}
		if !slices.Contains(roles, s.Role) {
			c.fail(w, r, s, errorf(http.StatusForbidden, "This page is not for your role."))
			return
		}
		if r.Method == http.MethodPost {
			sent := r.PostFormValue("csrf")
			if !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(sent), []byte(s.CSRF)) != 1 {
				c.fail(w, r, s, errorf(http.StatusForbidden, "This form is stale or came from elsewhere; reload the page and try again."))
				return
			}
		}
		if err := h(w, r, s); err != nil {
			c.fail(w, r, s, err)
		}
	}
}
