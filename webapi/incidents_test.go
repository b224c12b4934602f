package webapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/incident"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
	"github.com/lockstream/lockstream/webapi/live"
)

type incidentJSON struct {
	ID             string     `json:"id"`
	Subject        string     `json:"subject"`
	State          string     `json:"state"`
	Severity       string     `json:"severity"`
	AcknowledgedBy string     `json:"acknowledged_by"`
	AcknowledgedAt *time.Time `json:"acknowledged_at"`
	Timeline       []struct {
		Kind     string `json:"kind"`
		MemberID string `json:"member_id"`
		Channel  string `json:"channel"`
	} `json:"timeline"`
}

// newIncidentAPI is a test API with members and incidents on its own stores,
// and the incident store to run intake and rounds with.
func newIncidentAPI(t *testing.T) (*testAPI, *incident.PostgresStore) {
	t.Helper()
	stores := storagetest.New(t)
	reg := prometheus.NewRegistry()
	store := incident.NewPostgresStore(stores.Postgres)
	server, err := webapi.New(webapi.Config{AdminToken: testToken}, stores.Registry, nil, reg, reg,
		slog.New(slog.NewTextHandler(io.Discard, nil)),
		webapi.WithInbox(stores.Registry, live.NewPostgresStore(stores.Postgres), stores.Redis, webapi.InboxConfig{}),
		webapi.WithIncidents(incident.NewAPIStore(store)))
	if err != nil {
		t.Fatalf("webapi.New: %v", err)
	}
	ts := httptest.NewServer(server.Handler())
	t.Cleanup(ts.Close)
	return &testAPI{t: t, url: ts.URL, stores: stores, registry: reg, server: server}, store
}

// The incident routes: policy validation and default, the lists, ack twice,
// resolve, and the one-click link whose GET acknowledges nothing.
func TestIncidentRoutes(t *testing.T) {
	t.Parallel()
	a, store := newIncidentAPI(t)
	ctx := context.Background()
	a.createSensor("door1", "Door 1")
	c := a.createClient("acme")
	a.request("PUT", "/v1/clients/"+c.ID+"/sensors/door1", nil).expect(http.StatusNoContent)
	alice := a.createMember(c.ID, map[string]any{"name": "Alice"})
	bob := a.createMember(c.ID, map[string]any{"name": "Bob"})
	stranger := a.createMember(a.createClient("other").ID, map[string]any{"name": "Mallory"})

	policy := "/v1/clients/" + c.ID + "/escalation-policy"
	var pol map[string]any
	a.request("GET", policy, nil).expect(http.StatusOK).decode(&pol)
	if pol["default"] != true || pol["repeat_every"] != "15m0s" || pol["loops"] != float64(4) {
		t.Fatalf("default policy %v", pol)
	}
	a.request("PUT", policy, map[string]any{"severities": []string{"critical", "info"}, "repeat_every": "500ms",
		"loops": 0, "tiers": []map[string]any{{"after": "soon"}, {"members": []string{stranger.ID}}}}).
		expectInvalid("severities[1]", "repeat_every", "loops", "tiers[0].after")
	a.request("PUT", policy, map[string]any{"severities": []string{"critical"}, "repeat_every": "1s",
		"loops": 2, "tiers": []map[string]any{{"after": "0s"}, {"after": "1s", "members": []string{stranger.ID}}}}).
		expectInvalid("tiers[1].members[0]")
	a.request("PUT", policy, `{"severities": ["critical"], "repeat_every": 5}`).expect(http.StatusBadRequest)
	a.request("PUT", policy, map[string]any{"severities": []string{"critical"}, "repeat_every": "1m", "loops": 3,
		"tiers": []map[string]any{{"after": "0s", "members": []string{alice.ID}}, {"after": "2m"}}}).expect(http.StatusOK)
	a.request("GET", policy, nil).expect(http.StatusOK).decode(&pol)
	if pol["default"] != false || pol["repeat_every"] != "1m0s" {
		t.Fatalf("policy %v", pol)
	}

	d := 0
	a.fanout(storage.NotificationInput{EventID: "lost-1", Type: "connection_lost", SensorID: "door1", Data: &d,
		At: time.Now()})
	if _, err := store.Intake(ctx, 100); err != nil {
		t.Fatal(err)
	}
	var page pageJSON[incidentJSON]
	a.request("GET", "/v1/clients/"+c.ID+"/incidents?state=open", nil).expect(http.StatusOK).decode(&page)
	if len(page.Items) != 1 || page.Items[0].Subject != "sensor:door1" || page.Items[0].Severity != "critical" {
		t.Fatalf("open incidents %+v", page.Items)
	}
	id := page.Items[0].ID
	a.request("GET", "/v1/clients/"+c.ID+"/incidents?state=closed", nil).expectProblem(http.StatusBadRequest, "invalid-parameter")
	a.asMember(bob.Token, "GET", "/v1/incidents", nil).expect(http.StatusOK).decode(&page)
	if len(page.Items) != 1 {
		t.Fatalf("bob's incidents %+v", page.Items)
	}
	a.asMember(stranger.Token, "GET", "/v1/incidents", nil).expect(http.StatusOK).decode(&page)
	if len(page.Items) != 0 {
		t.Fatalf("a stranger sees %+v", page.Items)
	}
	a.asMember(stranger.Token, "GET", "/v1/incidents/"+id, nil).expectProblem(http.StatusNotFound, "not-found")

	// A reminder round gives alice (tier 1) a reminder with a link.
	res, err := store.RemindRound(ctx, incident.Round{Now: time.Now().Add(time.Second), Limit: 100,
		PublicURL: "https://ls.example.com/", AckTTL: time.Hour})
	if err != nil || res.Reminders != 1 {
		t.Fatalf("round %+v %v", res, err)
	}
	msgs := a.messages(alice.Token, "?message-type=incident_reminder")
	if msgs.Messages == nil || len(*msgs.Messages) != 1 {
		t.Fatalf("alice's reminders %+v", msgs)
	}
	var body struct {
		IncidentID string `json:"incident_id"`
		AckURL     string `json:"ack_url"`
	}
	if err := json.Unmarshal((*msgs.Messages)[0].Message, &body); err != nil || body.IncidentID != id {
		t.Fatalf("reminder %s: %v", (*msgs.Messages)[0].Message, err)
	}
	link := strings.TrimPrefix(body.AckURL, "https://ls.example.com")

	// A scanner's GET acknowledges nothing.
	for range 2 {
		page := a.request("GET", link, nil, "Authorization", "")
		if page.status != http.StatusOK || !strings.Contains(string(page.body), "<form method=\"post\">") {
			t.Fatalf("GET %s = %d %s", link, page.status, page.body)
		}
	}
	var inc incidentJSON
	a.asMember(alice.Token, "GET", "/v1/incidents/"+id, nil).expect(http.StatusOK).decode(&inc)
	if inc.State != "open" {
		t.Fatalf("after GETs of the link: %+v", inc)
	}

	// Bob acks through the API (admin acting for him); twice is a 200 that changes nothing.
	a.request("POST", "/v1/incidents/"+id+"/ack?user="+bob.ID, nil).expect(http.StatusOK).decode(&inc)
	if inc.State != "acknowledged" || inc.AcknowledgedBy != bob.ID {
		t.Fatalf("acked %+v", inc)
	}
	first := *inc.AcknowledgedAt
	a.asMember(alice.Token, "POST", "/v1/incidents/"+id+"/ack", nil).expect(http.StatusOK).decode(&inc)
	if inc.AcknowledgedBy != bob.ID || !inc.AcknowledgedAt.Equal(first) {
		t.Fatalf("a second ack changed it: %+v", inc)
	}
	// The link posts once.
	if r := a.request("POST", link, nil, "Authorization", ""); r.status != http.StatusOK {
		t.Fatalf("POST link = %d %s", r.status, r.body)
	}
	if r := a.request("POST", link, nil, "Authorization", ""); r.status != http.StatusGone ||
		!strings.Contains(string(r.body), "used already") {
		t.Fatalf("second POST link = %d %s", r.status, r.body)
	}
	a.asMember(alice.Token, "POST", "/v1/incidents/"+id+"/resolve", nil).expect(http.StatusOK).decode(&inc)
	if inc.State != "resolved" {
		t.Fatalf("resolved %+v", inc)
	}
	var kinds []string
	for _, e := range inc.Timeline {
		kinds = append(kinds, e.Kind+":"+e.Channel)
	}
	if strings.Join(kinds, ",") != "opened:,reminder:inbox,ack:api,resolve:api" {
		t.Fatalf("timeline %v", kinds)
	}
	a.request("DELETE", policy, nil).expect(http.StatusNoContent)
	a.request("GET", policy, nil).expect(http.StatusOK).decode(&pol)
	if pol["default"] != true {
		t.Fatalf("after DELETE %v", pol)
	}
}
