package console_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// newMember creates a member of clientID with token, through storage as the API
// does (the token stored as its SHA-256), and returns its id.
func newMember(t *testing.T, f *fixture, clientID, name, token string) string {
	t.Helper()
	hash := sha256.Sum256([]byte(token))
	m, _, err := f.stores.Registry.CreateMember(context.Background(), registry.Member{ClientID: clientID, Name: name,
		Email: strings.ToLower(name) + "@example.com", Timezone: "Europe/Paris", Preferences: registry.DefaultMemberPreferences()},
		hash[:], registry.Backfill{})
	if err != nil {
		t.Fatal(err)
	}
	return m.ID
}

// notify puts a free-form message into one member's inbox and returns its id.
func notify(t *testing.T, f *fixture, memberID, subject string) string {
	t.Helper()
	rec, err := inbox.NewPostgresStore(f.stores.Postgres).RecordNotification(context.Background(),
		inbox.FreeFormNotification{MemberID: memberID, Type: "announcement", Subject: subject})
	if err != nil || len(rec.Members) != 1 {
		t.Fatalf("recording a notification: %+v, %v", rec, err)
	}
	return rec.Members[0].MessageID
}

// A member signs in with its own token and lands in its inbox, sees its
// messages (not another member's), marks one seen with the page's form, and
// cannot open the admin's pages; a rotated token ends its session. The admin
// sees the client's members on the client page.
func TestMemberInbox(t *testing.T) {
	t.Parallel()
	f := newFixture(t, adminToken, nil, false)
	ctx := context.Background()
	client, err := f.stores.Registry.CreateClient(ctx, registry.Client{Name: "Acme", WebhookURL: "https://example.com/h", Secret: "whsec_x"})
	if err != nil {
		t.Fatal(err)
	}
	alice := newMember(t, f, client.ID, "Alice", "lsm_alice-token")
	bob := newMember(t, f, client.ID, "Bob", "lsm_bob-token")
	first := notify(t, f, alice, "Front door left open")
	second := notify(t, f, alice, "Battery low")
	bobs := notify(t, f, bob, "For Bob only")

	c := f.browser(t)
	resp, _ := post(t, c, f.srv.URL+"/console/login", url.Values{"token": {"lsm_not-a-member"}}, nil)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an unknown member token = %d, want 401", resp.StatusCode)
	}
	resp, _ = post(t, c, f.srv.URL+"/console/login", url.Values{"token": {"lsm_alice-token"}, "next": {"/console/"}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("member sign-in = %d", resp.StatusCode)
	}
	resp, _ = get(t, c, f.srv.URL+"/console/")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/inbox" {
		t.Fatalf("a member's /console/ = %d to %q, want its inbox", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := get(t, c, f.srv.URL+"/console/inbox")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `data-message="`+first+`"`) ||
		!strings.Contains(body, `data-message="`+second+`"`) || strings.Contains(body, bobs) ||
		!strings.Contains(body, `<span id="inbox-unseen">2</span>`) {
		t.Fatalf("the inbox page = %d:\n%s", resp.StatusCode, body)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)[1]
	for _, path := range []string{"/console/clients", "/console/clients/" + client.ID, "/console/live", "/console/sensors/x1"} {
		if resp, _ := get(t, c, f.srv.URL+path); resp.StatusCode != http.StatusForbidden {
			t.Errorf("a member's %s = %d, want 403", path, resp.StatusCode)
		}
	}

	if resp, _ := post(t, c, f.srv.URL+"/console/inbox/"+first+"/seen", url.Values{}, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("mark seen without the CSRF token = %d, want 403", resp.StatusCode)
	}
	if resp, _ := post(t, c, f.srv.URL+"/console/inbox/"+bobs+"/seen", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("marking another member's message = %d, want 404", resp.StatusCode)
	}
	resp, _ = post(t, c, f.srv.URL+"/console/inbox/"+first+"/seen", url.Values{"csrf": {csrf}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/inbox?seen="+first {
		t.Fatalf("mark seen = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if m, err := inbox.NewPostgresStore(f.stores.Postgres).GetInboxMessage(ctx, alice, first); err != nil || m.SeenAt == nil {
		t.Fatalf("after mark seen the message is %+v, %v; want seen", m, err)
	}
	if m, err := inbox.NewPostgresStore(f.stores.Postgres).GetInboxMessage(ctx, bob, bobs); err != nil || m.SeenAt != nil {
		t.Fatalf("Bob's message is %+v, %v; want unseen", m, err)
	}
	_, body = get(t, c, f.srv.URL+"/console/inbox?seen="+first)
	if !strings.Contains(body, `<span id="inbox-unseen">1</span>`) || !strings.Contains(body, "is marked seen") {
		t.Fatalf("the inbox after mark seen:\n%s", body)
	}

	// A rotated token ends the member's session.
	rotated := sha256.Sum256([]byte("lsm_alice-new-token"))
	if _, err := f.stores.Registry.RotateMemberToken(ctx, alice, rotated[:]); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, c, f.srv.URL+"/console/inbox"); resp.StatusCode != http.StatusSeeOther ||
		!strings.HasPrefix(resp.Header.Get("Location"), "/console/login") {
		t.Fatalf("after the token's rotation the inbox = %d to %q, want sign-in", resp.StatusCode, resp.Header.Get("Location"))
	}

	admin := f.browser(t)
	f.signIn(t, admin)
	_, body = get(t, admin, f.srv.URL+"/console/clients/"+client.ID)
	if !strings.Contains(body, `data-member="`+alice+`"`) || !strings.Contains(body, `data-member="`+bob+`"`) ||
		!strings.Contains(body, "Europe/Paris") {
		t.Fatalf("the client page does not list its members:\n%s", body)
	}
}

// TestIdleMemberTokenSignsInNoMore: a member token unused for the idle limit
// (60 days by default) signs in no more, as the API refuses it; one used within
// it does. The last use is moved back in Postgres, never waited for.
func TestIdleMemberTokenSignsInNoMore(t *testing.T) {
	t.Parallel()
	f := newFixture(t, adminToken, nil, false)
	ctx := context.Background()
	client, err := f.stores.Registry.CreateClient(ctx, registry.Client{Name: "Acme", WebhookURL: "https://example.com/h", Secret: "whsec_x"})
	if err != nil {
		t.Fatal(err)
	}
	alice := newMember(t, f, client.ID, "Alice", "lsm_alice-token")
	for _, c := range []struct {
		unused time.Duration
		want   int
	}{
		{61 * 24 * time.Hour, http.StatusUnauthorized},
		{59 * 24 * time.Hour, http.StatusSeeOther},
	} {
		if err := storagetest.SetMemberTokenUsed(ctx, f.stores.Postgres, alice, c.unused); err != nil {
			t.Fatal(err)
		}
		resp, _ := post(t, f.browser(t), f.srv.URL+"/console/login", url.Values{"token": {"lsm_alice-token"}, "next": {"/console/"}}, nil)
		if resp.StatusCode != c.want {
			t.Errorf("sign-in with a token unused for %s = %d, want %d", c.unused, resp.StatusCode, c.want)
		}
	}
}
