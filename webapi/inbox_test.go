package webapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
	"github.com/lockstream/lockstream/webapi/live"
)

// inboxWait bounds the waits of the inbox and stream tests: generous, for a loaded
// machine; they return as soon as what they wait for happens.
const inboxWait = 60 * time.Second

// newInboxAPI is a test API with members, inboxes and streams, on its own
// stores, its stream hub running.
func newInboxAPI(t *testing.T, cfg webapi.InboxConfig) *testAPI {
	t.Helper()
	stores := storagetest.New(t)
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	server, err := webapi.New(webapi.Config{AdminToken: testToken}, stores.Registry, nil, reg, reg, logger,
		webapi.WithInbox(stores.Registry, live.NewPostgresStore(stores.Postgres), stores.Redis, cfg))
	if err != nil {
		t.Fatalf("webapi.New: %v", err)
	}
	ts := httptest.NewServer(server.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := server.RunStreams(ctx); err != nil {
			t.Errorf("RunStreams: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		ts.Close()
	})
	return &testAPI{t: t, url: ts.URL, stores: stores, registry: reg, server: server}
}

type memberJSON struct {
	ID          string  `json:"id"`
	ClientID    string  `json:"client_id"`
	Name        string  `json:"name"`
	Email       *string `json:"email"`
	Timezone    string  `json:"timezone"`
	Preferences struct {
		Email       string   `json:"email"`
		Push        bool     `json:"push"`
		DigestTimes []string `json:"digest_times"`
	} `json:"preferences"`
	Routing struct {
		Sites       []string `json:"sites"`
		Sensors     []string `json:"sensors"`
		MinSeverity string   `json:"min_severity"`
	} `json:"routing"`
	QuietHours *struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"quiet_hours"`
	PushTargets []pushTargetJSON `json:"push_targets"`
	Token       string           `json:"token"`
	Backfilled  *int             `json:"backfilled"`
}

type messageJSON struct {
	ID     string `json:"id"`
	Seq    int64  `json:"seq"`
	Type   string `json:"type"`
	Sensor *struct {
		ID      string `json:"id"`
		Address string `json:"address"`
	} `json:"sensor"`
	Data     *int            `json:"data"`
	Previous *int            `json:"previous"`
	At       time.Time       `json:"at"`
	Severity string          `json:"severity"`
	Seen     bool            `json:"seen"`
	SeenAt   *time.Time      `json:"seen_at"`
	Cause    string          `json:"cause"`
	Subject  string          `json:"subject"`
	Message  json.RawMessage `json:"message"`
}

type messagesJSON struct {
	Total    int            `json:"total"`
	Messages *[]messageJSON `json:"messages"`
}

func (a *testAPI) createMember(clientID string, body map[string]any) memberJSON {
	a.t.Helper()
	var m memberJSON
	a.request("POST", "/v1/clients/"+clientID+"/members", body).expect(http.StatusCreated).decode(&m)
	return m
}

// asMember sends with a member's token.
func (a *testAPI) asMember(token, method, path string, body any) *response {
	a.t.Helper()
	return a.request(method, path, body, "Authorization", "Bearer "+token)
}

func (a *testAPI) messages(token, query string) messagesJSON {
	a.t.Helper()
	var out messagesJSON
	a.asMember(token, "GET", "/v1/messages"+query, nil).expect(http.StatusOK).decode(&out)
	return out
}

func msgSeqs(ms *[]messageJSON) []int64 {
	if ms == nil {
		return nil
	}
	var out []int64
	for _, m := range *ms {
		out = append(out, m.Seq)
	}
	return out
}

// fanout writes events as the fan-out does.
func (a *testAPI) fanout(events ...storage.NotificationInput) {
	a.t.Helper()
	if _, err := fanout.NewPostgresStore(a.stores.Postgres).CreateNotifications(context.Background(), events); err != nil {
		a.t.Fatal(err)
	}
}

func changed(id, sensor string, data int, at time.Time) storage.NotificationInput {
	return storage.NotificationInput{EventID: id, Type: "state_changed", SensorID: sensor, Data: &data, At: at}
}

var inboxT0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func TestMemberRoutes(t *testing.T) {
	t.Parallel()
	a := newInboxAPI(t, webapi.InboxConfig{})
	c := a.createClient("acme")

	a.request("POST", "/v1/clients/"+c.ID+"/members", map[string]any{
		"email": "not an address", "timezone": "Mars/Olympus",
		"preferences":  map[string]any{"email": "sometimes", "digest_times": []string{"9:00", "25:00", "08:00", "08:00"}},
		"push_targets": []map[string]any{{"platform": "BLACKBERRY", "push_key": "k"}},
	}).expectInvalid("name", "email", "timezone", "preferences.email", "preferences.digest_times[0]",
		"preferences.digest_times[1]", "preferences.digest_times[3]", "push_targets[0].platform")
	a.request("POST", "/v1/clients/0190b5a0-0000-7000-8000-000000000000/members", map[string]any{"name": "x"}).
		expectProblem(http.StatusNotFound, "not-found")

	m := a.createMember(c.ID, map[string]any{"name": "Alice", "email": "alice@example.com", "timezone": "Europe/Paris",
		"push_targets": []map[string]any{{"platform": "IOS", "push_key": "dev1"}}})
	if !strings.HasPrefix(m.Token, "lsm_") || len(m.Token) < 40 || m.Timezone != "Europe/Paris" ||
		m.Preferences.Email != "once_per_unread" || !m.Preferences.Push ||
		!slices.Equal(m.Preferences.DigestTimes, []string{"09:00", "17:00"}) || len(m.PushTargets) != 1 ||
		m.Backfilled == nil || *m.Backfilled != 0 {
		t.Fatalf("created member: %+v", m)
	}
	got := a.request("GET", "/v1/members/"+m.ID, nil).expect(http.StatusOK).fields()
	if _, shown := got["token"]; shown {
		t.Fatalf("GET shows the token: %v", got)
	}
	var page pageJSON[memberJSON]
	a.request("GET", "/v1/clients/"+c.ID+"/members", nil).expect(http.StatusOK).decode(&page)
	if len(page.Items) != 1 || page.Items[0].ID != m.ID {
		t.Fatalf("members of the client: %+v", page)
	}

	var patched memberJSON
	a.request("PATCH", "/v1/members/"+m.ID, map[string]any{"email": nil, "preferences": map[string]any{"email": "digest",
		"digest_times": []string{"07:30"}}}).expect(http.StatusOK).decode(&patched)
	if patched.Email != nil || patched.Preferences.Email != "digest" || !patched.Preferences.Push ||
		!slices.Equal(patched.Preferences.DigestTimes, []string{"07:30"}) || patched.Name != "Alice" {
		t.Fatalf("patched: %+v", patched)
	}
	a.request("PATCH", "/v1/members/"+m.ID, map[string]any{"timezone": "Nowhere/Land"}).expectInvalid("timezone")

	// Routing: everything by default; set whole; bad fields named; null resets.
	if patched.Routing.Sites != nil || patched.Routing.Sensors != nil || patched.Routing.MinSeverity != "info" {
		t.Fatalf("default routing: %+v", patched.Routing)
	}
	a.request("PATCH", "/v1/members/"+m.ID, map[string]any{"routing": map[string]any{"sites": []string{"north"},
		"min_severity": "warning"}}).expect(http.StatusOK).decode(&patched)
	if !slices.Equal(patched.Routing.Sites, []string{"north"}) || patched.Routing.Sensors != nil ||
		patched.Routing.MinSeverity != "warning" || patched.Preferences.Email != "digest" {
		t.Fatalf("routed: %+v", patched)
	}
	a.request("PATCH", "/v1/members/"+m.ID, map[string]any{"routing": map[string]any{"sites": []string{""},
		"min_severity": "loud"}}).expectInvalid("routing.sites[0]", "routing.min_severity")
	a.request("PATCH", "/v1/members/"+m.ID, map[string]any{"routing": nil}).expect(http.StatusOK).decode(&patched)
	if patched.Routing.Sites != nil || patched.Routing.MinSeverity != "info" {
		t.Fatalf("routing reset: %+v", patched.Routing)
	}

	// Quiet hours: set, bad times named, null removes them.
	a.request("PATCH", "/v1/members/"+m.ID, map[string]any{"quiet_hours": map[string]any{"from": "22:00", "to": "07:00"}}).
		expect(http.StatusOK).decode(&patched)
	if patched.QuietHours == nil || patched.QuietHours.From != "22:00" || patched.QuietHours.To != "07:00" {
		t.Fatalf("quiet hours: %+v", patched.QuietHours)
	}
	a.request("PATCH", "/v1/members/"+m.ID, map[string]any{"quiet_hours": map[string]any{"from": "25:00", "to": "7"}}).
		expectInvalid("quiet_hours.from", "quiet_hours.to")
	a.request("PATCH", "/v1/members/"+m.ID, map[string]any{"quiet_hours": nil}).expect(http.StatusOK).decode(&patched)
	if patched.QuietHours != nil {
		t.Fatalf("quiet hours after null: %+v", patched.QuietHours)
	}

	// The token works, a rotated one replaces it at once.
	a.messages(m.Token, "")
	var rotated memberJSON
	a.request("POST", "/v1/members/"+m.ID+"/token", nil).expect(http.StatusOK).decode(&rotated)
	if rotated.Token == m.Token || !strings.HasPrefix(rotated.Token, "lsm_") {
		t.Fatalf("rotated token %q", rotated.Token)
	}
	a.asMember(m.Token, "GET", "/v1/messages", nil).expectProblem(http.StatusUnauthorized, "unauthorized")
	a.messages(rotated.Token, "")
	// A member token opens no admin route.
	a.asMember(rotated.Token, "GET", "/v1/members/"+m.ID, nil).expectProblem(http.StatusUnauthorized, "unauthorized")

	a.request("DELETE", "/v1/members/"+m.ID, nil).expect(http.StatusNoContent)
	a.request("GET", "/v1/members/"+m.ID, nil).expectProblem(http.StatusNotFound, "not-found")
	a.asMember(rotated.Token, "GET", "/v1/messages", nil).expectProblem(http.StatusUnauthorized, "unauthorized")
}

func TestMessageRoutesAsTheContractSays(t *testing.T) {
	t.Parallel()
	a := newInboxAPI(t, webapi.InboxConfig{})
	a.createSensor("bdoor", "2 B Street")
	a.createSensor("adoor", "1 A Street")
	c := a.createClient("acme")
	a.request("PUT", "/v1/clients/"+c.ID+"/sensors/bdoor", nil).expect(http.StatusNoContent)
	a.request("PUT", "/v1/clients/"+c.ID+"/sensors/adoor", nil).expect(http.StatusNoContent)
	alice := a.createMember(c.ID, map[string]any{"name": "Alice"})
	bob := a.createMember(c.ID, map[string]any{"name": "Bob"})
	a.fanout(changed("e1", "bdoor", 0, inboxT0), changed("e2", "adoor", 1, inboxT0.Add(time.Minute)),
		storage.NotificationInput{EventID: "e3", Type: "connection_lost", SensorID: "bdoor", Data: new(0), At: inboxT0.Add(2 * time.Minute)})
	a.request("POST", "/v1/notifications", map[string]any{"member_id": alice.ID, "type": "billing",
		"subject": "Invoice", "message": map[string]any{"amount": 3}}).expect(http.StatusAccepted)

	all := a.messages(alice.Token, "")
	if all.Total != 4 || !slices.Equal(msgSeqs(all.Messages), []int64{4, 3, 2, 1}) {
		t.Fatalf("default listing (unseen, newest first): %d %v", all.Total, msgSeqs(all.Messages))
	}
	first := (*all.Messages)[3]
	if first.Type != "state_changed" || first.Sensor == nil || first.Sensor.ID != "bdoor" || first.Sensor.Address != "2 B Street" ||
		first.Data == nil || *first.Data != 0 || first.Seen || first.SeenAt != nil || first.Cause != "event" ||
		first.Severity != "info" || first.Subject == "" || !strings.Contains(string(first.Message), "unlocked") {
		t.Fatalf("first message: %+v", first)
	}
	if lost := (*all.Messages)[1]; lost.Severity != "critical" {
		t.Fatalf("lost while unlocked: %+v", lost)
	}
	if billing := (*all.Messages)[0]; billing.Sensor != nil || billing.Subject != "Invoice" || string(billing.Message) != `{"amount":3}` {
		t.Fatalf("free-form message: %+v %s", billing, billing.Message)
	}
	check := func(query string, total int, seqs ...int64) {
		t.Helper()
		got := a.messages(alice.Token, query)
		if got.Total != total || !slices.Equal(msgSeqs(got.Messages), seqs) {
			t.Errorf("GET /v1/messages%s: total %d seqs %v, want %d %v", query, got.Total, msgSeqs(got.Messages), total, seqs)
		}
	}
	check("?sort-dir=asc&limit=2&offset=1", 4, 2, 3)
	check("?sort-field=type&sort-dir=asc", 4, 4, 3, 1, 2)
	check("?sort-field=sensor&sort-dir=asc", 4, 2, 1, 3, 4)
	check("?message-type=state_changed", 2, 2, 1)
	if got := a.messages(alice.Token, "?count-only=true"); got.Total != 4 || got.Messages != nil {
		t.Fatalf("count-only: %+v", got)
	}
	if f := a.asMember(alice.Token, "GET", "/v1/messages?count-only=true", nil).fields(); len(f) != 1 {
		t.Fatalf("count-only answer has %v", f)
	}

	for query, name := range map[string]string{
		"?sort-field=severity": "sort-field", "?sort-dir=up": "sort-dir", "?limit=0": "limit", "?limit=1001": "limit",
		"?offset=-1": "offset", "?seen=yes": "seen", "?count-only=1": "count-only", "?message-type=a%20b": "message-type",
		"?colour=red": "colour", "?limit=1&limit=2": "limit",
	} {
		a.asMember(alice.Token, "GET", "/v1/messages"+query, nil).expectProblem(http.StatusBadRequest, "invalid-parameter", name)
	}

	// One message: get, seen, unseen, delete; another member's is a 404.
	id := first.ID
	var one messageJSON
	a.asMember(alice.Token, "GET", "/v1/messages/"+id, nil).expect(http.StatusOK).decode(&one)
	if one.Seq != 1 || one.ID != id {
		t.Fatalf("GET one: %+v", one)
	}
	a.asMember(bob.Token, "GET", "/v1/messages/"+id, nil).expectProblem(http.StatusNotFound, "not-found")
	a.asMember(bob.Token, "POST", "/v1/messages/"+id+"/seen", nil).expectProblem(http.StatusNotFound, "not-found")
	a.asMember(bob.Token, "DELETE", "/v1/messages/"+id, nil).expectProblem(http.StatusNotFound, "not-found")
	a.asMember(alice.Token, "POST", "/v1/messages/"+id+"/seen", nil).expect(http.StatusNoContent)
	check("", 3, 4, 3, 2)
	check("?seen=true&sort-dir=asc", 4, 1, 2, 3, 4)
	a.asMember(alice.Token, "GET", "/v1/messages/"+id, nil).expect(http.StatusOK).decode(&one)
	if !one.Seen || one.SeenAt == nil {
		t.Fatalf("seen message: %+v", one)
	}
	a.asMember(alice.Token, "POST", "/v1/messages/"+id+"/unseen", nil).expect(http.StatusNoContent)
	check("", 4, 4, 3, 2, 1)
	a.asMember(alice.Token, "DELETE", "/v1/messages/"+id, nil).expect(http.StatusNoContent)
	a.asMember(alice.Token, "GET", "/v1/messages/"+id, nil).expectProblem(http.StatusNotFound, "not-found")
	check("?seen=true", 3, 4, 3, 2)

	// Bulk: ids, then all_notifications (ids ignored).
	ids := func(seqs ...int64) []string {
		var out []string
		for _, m := range *a.messages(alice.Token, "?seen=true").Messages {
			if slices.Contains(seqs, m.Seq) {
				out = append(out, m.ID)
			}
		}
		return out
	}
	a.asMember(alice.Token, "POST", "/v1/messages/seen", map[string]any{"ids": ids(2, 3)}).expect(http.StatusNoContent)
	check("", 1, 4)
	a.asMember(alice.Token, "POST", "/v1/messages/seen", map[string]any{"ids": []string{"x"}}).expectInvalid("ids[0]")
	a.asMember(alice.Token, "POST", "/v1/messages/delete", map[string]any{}).expectInvalid("ids")
	a.asMember(alice.Token, "POST", "/v1/messages/seen", map[string]any{"ids": []string{}, "all_notifications": true}).
		expect(http.StatusNoContent)
	check("", 0)
	a.asMember(alice.Token, "POST", "/v1/messages/delete", map[string]any{"ids": ids(2), "all_notifications": true}).
		expect(http.StatusNoContent)
	check("?seen=true", 0)
	if got := a.messages(bob.Token, "?count-only=true"); got.Total != 3 {
		t.Fatalf("bob's inbox after alice's bulk: %+v", got)
	}

	// The admin acts for a member with ?user=, and only with it; a member never.
	var forBob messagesJSON
	a.request("GET", "/v1/messages?user="+bob.ID, nil).expect(http.StatusOK).decode(&forBob)
	if forBob.Total != 3 {
		t.Fatalf("admin for bob: %+v", forBob)
	}
	bobFirst := (*forBob.Messages)[2].ID
	a.request("POST", "/v1/messages/"+bobFirst+"/seen?user="+bob.ID, nil).expect(http.StatusNoContent)
	a.request("GET", "/v1/messages/"+bobFirst+"?user="+alice.ID, nil).expectProblem(http.StatusNotFound, "not-found")
	a.request("GET", "/v1/messages", nil).expectProblem(http.StatusBadRequest, "invalid-parameter", "user")
	a.request("GET", "/v1/messages?user=0190b5a0-0000-7000-8000-000000000000", nil).expectProblem(http.StatusNotFound, "not-found")
	a.asMember(alice.Token, "GET", "/v1/messages?user="+bob.ID, nil).expectProblem(http.StatusBadRequest, "invalid-parameter", "user")
	a.request("GET", "/v1/messages", nil, "Authorization", "Bearer nope").expectProblem(http.StatusUnauthorized, "unauthorized")
}

func TestNotificationsRoute(t *testing.T) {
	t.Parallel()
	a := newInboxAPI(t, webapi.InboxConfig{})
	c := a.createClient("acme")
	empty := a.createClient("nobody")
	alice := a.createMember(c.ID, map[string]any{"name": "Alice"})
	bob := a.createMember(c.ID, map[string]any{"name": "Bob"})

	var recorded struct {
		Messages int `json:"messages"`
	}
	a.request("POST", "/v1/notifications", map[string]any{"client_id": c.ID, "type": "maintenance",
		"subject": "Tonight", "message": "the gateway restarts at 22:00"}).expect(http.StatusAccepted).decode(&recorded)
	if recorded.Messages != 2 {
		t.Fatalf("recorded %+v, want 2 messages", recorded)
	}
	a.request("POST", "/v1/notifications", map[string]any{"client_id": empty.ID, "type": "x", "subject": "s"}).
		expect(http.StatusAccepted)
	for _, m := range []memberJSON{alice, bob} {
		got := a.messages(m.Token, "")
		if got.Total != 1 || (*got.Messages)[0].Type != "maintenance" || (*got.Messages)[0].Subject != "Tonight" ||
			string((*got.Messages)[0].Message) != `"the gateway restarts at 22:00"` {
			t.Fatalf("%s: %+v", m.Name, got)
		}
	}
	a.request("POST", "/v1/notifications", map[string]any{"type": "a b", "subject": ""}).
		expectInvalid("member_id", "type", "subject")
	a.request("POST", "/v1/notifications", map[string]any{"client_id": c.ID, "member_id": alice.ID, "type": "t", "subject": "s"}).
		expectInvalid("client_id")
	a.request("POST", "/v1/notifications", map[string]any{"member_id": "0190b5a0-0000-7000-8000-000000000000",
		"type": "t", "subject": "s"}).expectProblem(http.StatusNotFound, "not-found")
	a.asMember(alice.Token, "POST", "/v1/notifications", map[string]any{"member_id": alice.ID, "type": "t", "subject": "s"}).
		expectProblem(http.StatusUnauthorized, "unauthorized")
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id, event, data string
}

// sseStream reads a stream's events in the background.
type sseStream struct {
	t      *testing.T
	events chan sseEvent
	status int
	body   string
	cancel context.CancelFunc
	done   chan struct{}
}

// openStream takes a ticket with the member's token and opens the stream, with
// Last-Event-ID when lastEventID is not empty.
func (a *testAPI) openStream(token, lastEventID string) *sseStream {
	a.t.Helper()
	var ticket struct {
		Ticket    string `json:"ticket"`
		ExpiresIn int    `json:"expires_in"`
	}
	a.asMember(token, "POST", "/v1/stream/tickets", nil).expect(http.StatusOK).decode(&ticket)
	if ticket.ExpiresIn != 60 || ticket.Ticket == "" {
		a.t.Fatalf("ticket %+v", ticket)
	}
	return a.dialStream(ticket.Ticket, lastEventID)
}

func (a *testAPI) dialStream(ticket, lastEventID string) *sseStream {
	a.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", a.url+"/v1/stream?ticket="+url.QueryEscape(ticket), nil)
	if err != nil {
		a.t.Fatal(err)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		a.t.Fatalf("opening the stream: %v", err)
	}
	s := &sseStream{t: a.t, events: make(chan sseEvent, 10000), status: resp.StatusCode, cancel: cancel, done: make(chan struct{})}
	if resp.StatusCode != http.StatusOK {
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		resp.Body.Close()
		s.body = b.String()
		close(s.done)
		close(s.events)
		return s
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		a.t.Fatalf("stream Content-Type %q", ct)
	}
	go func() {
		defer close(s.done)
		defer close(s.events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.event != "" {
					s.events <- e
				}
				e = sseEvent{}
			case strings.HasPrefix(line, ":"):
				s.events <- sseEvent{event: "comment", data: strings.TrimSpace(line[1:])}
			case strings.HasPrefix(line, "id: "):
				e.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				e.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				e.data = line[6:]
			}
		}
	}()
	a.t.Cleanup(s.close)
	return s
}

func (s *sseStream) close() {
	s.cancel()
	<-s.done
}

// next returns the next event other than a comment, failing the test if none
// comes.
func (s *sseStream) next() sseEvent {
	s.t.Helper()
	timer := time.NewTimer(inboxWait)
	defer timer.Stop()
	for {
		select {
		case e, ok := <-s.events:
			if !ok {
				s.t.Fatal("the stream ended")
			}
			if e.event != "comment" {
				return e
			}
		case <-timer.C:
			s.t.Fatalf("no event within %v", inboxWait)
		}
	}
}

// nextMessage returns the next event, which must be a message, decoded.
func (s *sseStream) nextMessage() messageJSON {
	s.t.Helper()
	e := s.next()
	if e.event != "message" {
		s.t.Fatalf("event %+v, want a message", e)
	}
	var m messageJSON
	if err := json.Unmarshal([]byte(e.data), &m); err != nil {
		s.t.Fatalf("message data %q: %v", e.data, err)
	}
	if e.id != fmt.Sprint(m.Seq) {
		s.t.Fatalf("event id %q for seq %d", e.id, m.Seq)
	}
	return m
}

type helloJSON struct {
	Epoch    string `json:"epoch"`
	AckedSeq int64  `json:"acked_seq"`
	LastSeq  int64  `json:"last_seq"`
}

func (s *sseStream) hello() helloJSON {
	s.t.Helper()
	e := s.next()
	var h helloJSON
	if e.event != "hello" || json.Unmarshal([]byte(e.data), &h) != nil || h.Epoch == "" {
		s.t.Fatalf("first event %+v, want hello", e)
	}
	return h
}

// expectSeqs reads messages and fails unless their seqs are want, in order.
func (s *sseStream) expectSeqs(want ...int64) []messageJSON {
	s.t.Helper()
	var got []messageJSON
	for range want {
		got = append(got, s.nextMessage())
	}
	for i, m := range got {
		if m.Seq != want[i] {
			s.t.Fatalf("stream seqs %v, want %v", msgSeqs(&got), want)
		}
	}
	return got
}

func TestStreamReplaysAfterAckThenLiveWithoutDuplicate(t *testing.T) {
	t.Parallel()
	a := newInboxAPI(t, webapi.InboxConfig{StreamPing: 50 * time.Millisecond})
	a.createSensor("door1", "1 A Street")
	c := a.createClient("acme")
	a.request("PUT", "/v1/clients/"+c.ID+"/sensors/door1", nil).expect(http.StatusNoContent)
	m := a.createMember(c.ID, map[string]any{"name": "Alice"})
	at := inboxT0
	event := func(i int) {
		a.fanout(changed(fmt.Sprint("e", i), "door1", i%2, at.Add(time.Duration(i)*time.Second)))
	}
	event(1)
	event(2)

	s := a.openStream(m.Token, "")
	if h := s.hello(); h.AckedSeq != 0 || h.LastSeq != 2 {
		t.Fatalf("hello %+v", h)
	}
	s.expectSeqs(1, 2)
	event(3) // live
	if got := s.expectSeqs(3); got[0].Sensor.ID != "door1" || got[0].Cause != "event" {
		t.Fatalf("live message %+v", got[0])
	}
	// Pings keep an idle stream open.
	for e := range s.events {
		if e.event == "comment" && e.data == "ping" {
			break
		}
	}
	a.asMember(m.Token, "POST", "/v1/stream/ack", map[string]any{"seq": 3}).expect(http.StatusNoContent)
	a.asMember(m.Token, "POST", "/v1/stream/ack", map[string]any{"seq": 9}).expectInvalid("seq")
	a.asMember(m.Token, "POST", "/v1/stream/ack", map[string]any{}).expectInvalid("seq")
	s.close()

	// Away: three events; back with the acked seq: exactly those, then live.
	event(4)
	event(5)
	event(6)
	s = a.openStream(m.Token, "")
	if h := s.hello(); h.AckedSeq != 3 || h.LastSeq != 6 {
		t.Fatalf("hello after the ack %+v", h)
	}
	s.expectSeqs(4, 5, 6)
	event(7)
	event(8)
	s.expectSeqs(7, 8)
	s.close()

	// Last-Event-ID wins over the acked seq.
	s = a.openStream(m.Token, "6")
	s.hello()
	s.expectSeqs(7, 8)
	s.close()

	// A ticket opens one stream.
	var ticket struct {
		Ticket string `json:"ticket"`
	}
	a.asMember(m.Token, "POST", "/v1/stream/tickets", nil).expect(http.StatusOK).decode(&ticket)
	first := a.dialStream(ticket.Ticket, "")
	first.hello()
	if again := a.dialStream(ticket.Ticket, ""); again.status != http.StatusUnauthorized || !strings.Contains(again.body, "ticket") {
		t.Fatalf("reused ticket: %d %s", again.status, again.body)
	}
	first.close()
	if bad := a.dialStream("made-up", ""); bad.status != http.StatusUnauthorized {
		t.Fatalf("made-up ticket: %d", bad.status)
	}
	// The admin token takes no ticket: a stream is a member's own.
	a.request("POST", "/v1/stream/tickets?user="+m.ID, nil).expectProblem(http.StatusUnauthorized, "unauthorized")

	// Messages no longer stored (retention dropped them): reset, then what follows.
	conn, err := pgx.Connect(context.Background(), a.stores.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `DELETE FROM inbox_messages WHERE member_id = $1 AND seq <= 5`, m.ID); err != nil {
		t.Fatal(err)
	}
	s = a.openStream(m.Token, "2")
	s.hello()
	reset := s.next()
	if reset.event != "reset" || reset.id != "8" || !strings.Contains(reset.data, `"last_seq":8`) {
		t.Fatalf("want a reset, got %+v", reset)
	}
	event(9)
	s.expectSeqs(9)
	s.close()
	s = a.openStream(m.Token, "5") // 6 is still stored: no reset
	s.hello()
	s.expectSeqs(6, 7, 8, 9)
}

// A reader that takes nothing is cut off when a write cannot finish within the
// write timeout, and holds up nobody meanwhile: another member's stream gets
// every message.
func TestStreamSlowReaderIsCutOffOthersUnaffected(t *testing.T) {
	t.Parallel()
	a := newInboxAPI(t, webapi.InboxConfig{StreamBuffer: 4, StreamWriteTimeout: 300 * time.Millisecond})
	c := a.createClient("acme")
	slow := a.createMember(c.ID, map[string]any{"name": "Slow"})
	fast := a.createMember(c.ID, map[string]any{"name": "Fast"})

	var ticket struct {
		Ticket string `json:"ticket"`
	}
	a.asMember(slow.Token, "POST", "/v1/stream/tickets", nil).expect(http.StatusOK).decode(&ticket)
	// A client that sends its request and never reads the answer.
	u, _ := url.Parse(a.url)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/stream?ticket=%s HTTP/1.1\r\nHost: %s\r\n\r\n", ticket.Ticket, u.Host)

	s := a.openStream(fast.Token, "")
	s.hello()
	big := strings.Repeat("x", 15000)
	const n = 600 // ~9 MB to the slow reader: more than the socket buffers hold
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			if _, err := inbox.NewPostgresStore(a.stores.Postgres).RecordNotification(context.Background(), inbox.FreeFormNotification{
				ClientID: c.ID, Type: "bulk", Subject: fmt.Sprint("m", i), Message: json.RawMessage(`"` + big + `"`)}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for i := range n {
		if m := s.nextMessage(); m.Seq != int64(i+1) {
			t.Fatalf("fast reader got seq %d, want %d", m.Seq, i+1)
		}
	}
	wg.Wait()
	cutoffs := func() float64 {
		return counterValue(t, a.registry, "lockstream_stream_cutoffs_total", "reason", "slow")
	}
	deadline := time.Now().Add(inboxWait)
	for cutoffs() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the slow reader was never cut off")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counterValue reads one series of a counter (labelled label=value) from reg; 0
// when absent.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// Over HTTP/2 the connection cannot be taken over; the stream is served through
// the ResponseWriter instead, with the same events.
func TestStreamOverHTTP2(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	reg := prometheus.NewRegistry()
	server, err := webapi.New(webapi.Config{AdminToken: testToken}, stores.Registry, nil, reg, reg,
		slog.New(slog.DiscardHandler), webapi.WithInbox(stores.Registry, live.NewPostgresStore(stores.Postgres), stores.Redis,
			webapi.InboxConfig{StreamPing: 50 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(server.Handler())
	ts.EnableHTTP2 = true
	ts.StartTLS()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = server.RunStreams(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		ts.Close()
	})
	c := tlsCall(t, ts, "POST", "/v1/clients", testToken, map[string]any{"name": "h2", "webhook_url": "https://example.com/h"})
	m := tlsCall(t, ts, "POST", "/v1/clients/"+c["id"].(string)+"/members", testToken, map[string]any{"name": "Alice"})
	ticket := tlsCall(t, ts, "POST", "/v1/stream/tickets", m["token"].(string), nil)

	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/stream?ticket="+url.QueryEscape(ticket["ticket"].(string)), nil)
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream over %s: %s %q", resp.Proto, resp.Status, resp.Header.Get("Content-Type"))
	}
	if _, err := inbox.NewPostgresStore(stores.Postgres).RecordNotification(context.Background(), inbox.FreeFormNotification{
		MemberID: m["id"].(string), Type: "note", Subject: "over h2"}); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	var events []string
	for sc.Scan() && len(events) < 2 {
		if line := sc.Text(); strings.HasPrefix(line, "event: ") {
			events = append(events, line)
		} else if strings.HasPrefix(line, "data: ") && len(events) == 2 && !strings.Contains(line, "over h2") {
			t.Fatalf("message %s", line)
		}
	}
	if !slices.Equal(events, []string{"event: hello", "event: message"}) {
		t.Fatalf("events over HTTP/2: %v", events)
	}
}

// tlsCall makes one request to a TLS test server and decodes its JSON answer.
func tlsCall(t *testing.T, ts *httptest.Server, method, path, token string, body any) map[string]any {
	t.Helper()
	var reader io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		reader = strings.NewReader(string(b))
	}
	req, _ := http.NewRequest(method, ts.URL+path, reader)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %s %v %v", method, path, resp.Status, out, err)
	}
	return out
}

// TestIdleMemberTokenStopsWorking: a member token unused for
// LOCKSTREAM_MEMBER_TOKEN_IDLE (here 30 days) is refused with a 401 naming the
// rotation route, whatever route it tries, and stays refused; one used just
// within the limit works and its use is recorded; a rotated token works. The
// token's last use is moved back in Postgres, never waited for.
func TestIdleMemberTokenStopsWorking(t *testing.T) {
	t.Parallel()
	const idle = 30 * 24 * time.Hour
	a := newInboxAPI(t, webapi.InboxConfig{MemberTokenIdle: idle})
	c := a.createClient("acme")
	m := a.createMember(c.ID, map[string]any{"name": "Alice"})
	ctx, pg := context.Background(), a.stores.Postgres
	age := func(d time.Duration) {
		t.Helper()
		if err := storagetest.SetMemberTokenUsed(ctx, pg, m.ID, d); err != nil {
			t.Fatal(err)
		}
	}

	age(idle - time.Hour)
	a.messages(m.Token, "")
	if used, err := storagetest.MemberTokenUsedAge(ctx, pg, m.ID); err != nil || used > time.Minute {
		t.Fatalf("a use of a token last used %s ago: now last used %s ago (%v), want recorded", idle-time.Hour, used, err)
	}

	age(idle + time.Hour)
	for _, route := range [][2]string{{"GET", "/v1/messages"}, {"POST", "/v1/stream/ack"}, {"POST", "/v1/stream/tickets"}} {
		resp := a.asMember(m.Token, route[0], route[1], nil)
		resp.expectProblem(http.StatusUnauthorized, "unauthorized", "30d", "LOCKSTREAM_MEMBER_TOKEN_IDLE",
			"POST /v1/members/"+m.ID+"/token")
		if got := resp.header.Get("WWW-Authenticate"); !strings.Contains(got, `error="invalid_token"`) {
			t.Errorf("%s %s: WWW-Authenticate %q", route[0], route[1], got)
		}
	}
	// Refused attempts are no use: the token stays idle.
	if used, err := storagetest.MemberTokenUsedAge(ctx, pg, m.ID); err != nil || used < idle {
		t.Fatalf("an idle token's last use moved to %s ago (%v)", used, err)
	}

	var rotated memberJSON
	a.request("POST", "/v1/members/"+m.ID+"/token", nil).expect(http.StatusOK).decode(&rotated)
	a.messages(rotated.Token, "")
}
