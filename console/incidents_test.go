package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/incident"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// openIncidents fans out a critical loss of each sensor (a loss while
// unlocked), and of resolved a loss then its restore, through the fan-out's
// statement, and lets the incident intake read them.
func openIncidents(t *testing.T, f *fixture, open, resolved string) {
	t.Helper()
	ctx := context.Background()
	unlocked := 0
	at := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	events := []storage.NotificationInput{
		{EventID: "lost-" + open, Type: "connection_lost", SensorID: open, Data: &unlocked, At: at},
		{EventID: "lost-" + resolved, Type: "connection_lost", SensorID: resolved, Data: &unlocked, At: at},
		{EventID: "back-" + resolved, Type: "connection_restored", SensorID: resolved, Data: &unlocked, At: at.Add(time.Hour)},
	}
	if _, err := fanout.NewPostgresStore(f.stores.Postgres).CreateNotifications(ctx, events); err != nil {
		t.Fatal(err)
	}
	if _, err := incident.NewPostgresStore(f.stores.Postgres).Intake(ctx, 100); err != nil {
		t.Fatal(err)
	}
}

// incidentRow says whether the table of a state has the incident's row.
func incidentRow(body, state, id string) bool {
	table := regexp.MustCompile(`(?s)<table id="incidents-` + state + `".*?</table>`).FindString(body)
	return strings.Contains(table, `data-incident="`+id+`"`)
}

// A member sees its client's incidents open first, acknowledges and resolves
// one with the page's buttons (the timeline says so, channel console), and
// cannot see another client's; the admin sees a client's incidents and their
// timelines but has no buttons, since an ack is a member's.
func TestConsoleIncidents(t *testing.T) {
	t.Parallel()
	f := newFixture(t, adminToken, nil, false)
	ctx := context.Background()
	pg := f.stores.Postgres
	client, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "Acme", WebhookURL: "https://example.com/h", Secret: "whsec_x"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "Other", WebhookURL: "https://example.com/o", Secret: "whsec_y"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"door1", "door2"} {
		if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: id, Address: "addr " + id}); err != nil {
			t.Fatal(err)
		}
		if err := registry.New(pg).LinkSensor(ctx, client.ID, id); err != nil {
			t.Fatal(err)
		}
	}
	alice := newMember(t, f, client.ID, "Alice", "lsm_alice-token")
	newMember(t, f, other.ID, "Mallory", "lsm_mallory-token")
	openIncidents(t, f, "door1", "door2")

	store := incident.NewAPIStore(incident.NewPostgresStore(pg))
	all, err := store.ListIncidents(ctx, client.ID, "", "", 10)
	if err != nil || len(all) != 2 {
		t.Fatalf("incidents of the client: %+v, %v; want 2", all, err)
	}
	ids := map[string]string{}
	for _, inc := range all {
		ids[inc.State] = inc.ID
	}
	openID, resolvedID := ids[domain.IncidentOpen], ids[domain.IncidentResolved]
	if openID == "" || resolvedID == "" {
		t.Fatalf("want one open and one resolved incident, got %+v", all)
	}

	c := f.browser(t)
	post(t, c, f.srv.URL+"/console/login", url.Values{"token": {"lsm_alice-token"}}, nil)
	resp, body := get(t, c, f.srv.URL+"/console/incidents")
	if resp.StatusCode != http.StatusOK || !incidentRow(body, "open", openID) || !incidentRow(body, "resolved", resolvedID) ||
		strings.Index(body, `id="incidents-open"`) > strings.Index(body, `id="incidents-resolved"`) {
		t.Fatalf("the member's incidents page = %d, want %s open (first) and %s resolved:\n%s", resp.StatusCode, openID, resolvedID, body)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)[1]

	mallory := f.browser(t)
	post(t, mallory, f.srv.URL+"/console/login", url.Values{"token": {"lsm_mallory-token"}}, nil)
	if resp, _ := get(t, mallory, f.srv.URL+"/console/incidents/"+openID); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another client's member opens the incident: %d, want 404", resp.StatusCode)
	}
	if _, body := get(t, mallory, f.srv.URL+"/console/incidents"); strings.Contains(body, openID) {
		t.Fatalf("another client's member lists the incident:\n%s", body)
	}

	ack := f.srv.URL + "/console/incidents/" + openID + "/ack"
	if resp, _ := post(t, c, ack, url.Values{}, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("ack without the CSRF token = %d, want 403", resp.StatusCode)
	}
	resp, _ = post(t, c, ack, url.Values{"csrf": {csrf}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/incidents/"+openID+"?done=ack" {
		t.Fatalf("ack = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	inc, err := store.GetIncident(ctx, openID, "")
	if err != nil || inc.State != domain.IncidentAcknowledged || inc.AcknowledgedBy != alice {
		t.Fatalf("after the console's ack: %+v, %v", inc, err)
	}
	_, body = get(t, c, f.srv.URL+"/console/incidents/"+openID+"?done=ack")
	if !strings.Contains(body, `<dd id="incident-state">acknowledged</dd>`) || !strings.Contains(body, "Incident acknowledged.") ||
		!regexp.MustCompile(`(?s)<tr data-kind="ack">(?:[^<]|<[^/]|</[^t]|</t[^r])*<td>console</td>`).MatchString(body) ||
		strings.Contains(body, `class="ack"`) || !strings.Contains(body, `class="resolve"`) {
		t.Fatalf("the incident page after the ack:\n%s", body)
	}
	resp, _ = post(t, c, f.srv.URL+"/console/incidents/"+openID+"/resolve", url.Values{"csrf": {csrf}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("resolve = %d", resp.StatusCode)
	}
	if inc, err := store.GetIncident(ctx, openID, ""); err != nil || inc.State != domain.IncidentResolved || inc.ResolvedBy != alice {
		t.Fatalf("after the console's resolve: %+v, %v", inc, err)
	}

	admin := f.browser(t)
	f.signIn(t, admin)
	_, body = get(t, admin, f.srv.URL+"/console/clients/"+client.ID)
	if !strings.Contains(body, `href="/console/clients/`+client.ID+`/incidents"`) {
		t.Fatalf("the client page does not link its incidents:\n%s", body)
	}
	resp, body = get(t, admin, f.srv.URL+"/console/clients/"+client.ID+"/incidents")
	if resp.StatusCode != http.StatusOK || !incidentRow(body, "resolved", openID) || !incidentRow(body, "resolved", resolvedID) ||
		strings.Contains(body, `class="resolve"`) {
		t.Fatalf("the admin's incidents of the client = %d:\n%s", resp.StatusCode, body)
	}
	resp, body = get(t, admin, f.srv.URL+"/console/incidents/"+resolvedID)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<tr data-kind="opened">`) {
		t.Fatalf("the admin's incident page = %d:\n%s", resp.StatusCode, body)
	}
	adminCSRF := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)[1]
	if resp, _ := post(t, admin, ack, url.Values{"csrf": {adminCSRF}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the admin's ack = %d, want 403 (an ack is a member's)", resp.StatusCode)
	}
}
