package webapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/lockstream/lockstream/webapi"
)

// published records what POST /notification published (the real publisher,
// bridge/amqp's, is tested against RabbitMQ in its package and in the process
// tests).
type published struct {
	mu   sync.Mutex
	fail bool
	got  []string
}

func (p *published) PublishNotification(_ context.Context, typ string, body []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail {
		return errors.New("broker down")
	}
	p.got = append(p.got, typ+" "+string(body))
	return nil
}

func TestPostNotification(t *testing.T) {
	t.Parallel()
	pub := &published{}
	api := newTestAPI(t, apiOptions{opts: []webapi.Option{webapi.WithNotificationPublisher(pub)}})

	resp := api.request(http.MethodPost, "/notification", `{"member_id":"m1","type":"data","subject":"Upload done","message":{"file":"a.txt"},"email":true}`)
	if resp.status != http.StatusAccepted {
		t.Fatalf("POST /notification: %d %s", resp.status, resp.body)
	}
	var answer struct {
		RoutingKey string `json:"routing_key"`
	}
	if err := json.Unmarshal(resp.body, &answer); err != nil || answer.RoutingKey != "events.notification.update.data" {
		t.Errorf("answer %s", resp.body)
	}
	want := `data {"member_id":"m1","type":"data","subject":"Upload done","message":{"file":"a.txt"},"email":true}`
	if len(pub.got) != 1 || pub.got[0] != want {
		t.Errorf("published %q, want %q", pub.got, want)
	}

	for _, c := range []struct{ body, field string }{
		{`{"type":"data","subject":"s"}`, "member_id"},
		{`{"member_id":"m","client_id":"c","type":"data","subject":"s"}`, "client_id"},
		{`{"member_id":"m","type":"a.b","subject":"s"}`, "type"},
		{`{"member_id":"m","type":"data","subject":" "}`, "subject"},
	} {
		resp := api.request(http.MethodPost, "/notification", c.body)
		if resp.status != http.StatusUnprocessableEntity || !strings.Contains(string(resp.body), `"field":"`+c.field+`"`) {
			t.Errorf("POST %s: %d %s, want 422 naming %s", c.body, resp.status, resp.body, c.field)
		}
	}
	if resp := api.request(http.MethodPost, "/notification", `{"member_id":"m","type":"data","subject":"s","colour":"x"}`); resp.status != http.StatusBadRequest {
		t.Errorf("unknown field: %d %s, want 400", resp.status, resp.body)
	}
	if resp := api.request(http.MethodPost, "/notification", `{"member_id":"m","type":"data","subject":"s"}`, "Authorization", ""); resp.status != http.StatusUnauthorized {
		t.Errorf("without the admin token: %d, want 401", resp.status)
	}
	pub.mu.Lock()
	pub.fail = true
	pub.mu.Unlock()
	if resp := api.request(http.MethodPost, "/notification", `{"member_id":"m","type":"data","subject":"s"}`); resp.status != http.StatusServiceUnavailable || resp.header.Get("Retry-After") == "" {
		t.Errorf("broker down: %d %v, want 503 with Retry-After", resp.status, resp.header)
	}
}

func TestPostNotificationWithoutAMQP(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})
	resp := api.request(http.MethodPost, "/notification", `{"member_id":"m","type":"data","subject":"s"}`)
	if resp.status != http.StatusServiceUnavailable || !strings.Contains(string(resp.body), "LOCKSTREAM_AMQP_URL") {
		t.Errorf("without a publisher: %d %s, want 503 naming LOCKSTREAM_AMQP_URL", resp.status, resp.body)
	}
}

// Without AMQP but with the members' inbox, POST /notification records the
// notification directly, as POST /v1/notifications does.
func TestPostNotificationRecordsDirectlyWithoutAMQP(t *testing.T) {
	t.Parallel()
	a := newInboxAPI(t, webapi.InboxConfig{})
	c := a.createClient("acme")
	alice := a.createMember(c.ID, map[string]any{"name": "Alice"})
	a.request(http.MethodPost, "/notification", map[string]any{"member_id": alice.ID, "type": "upload",
		"subject": "Upload done"}).expect(http.StatusAccepted)
	got := a.messages(alice.Token, "")
	if got.Total != 1 || (*got.Messages)[0].Type != "upload" || (*got.Messages)[0].Subject != "Upload done" {
		t.Fatalf("alice's inbox after POST /notification: %+v", got)
	}
	a.request(http.MethodPost, "/notification", map[string]any{"member_id": "01a20a61-8608-7732-b6ee-92df4cb0788b",
		"type": "upload", "subject": "s"}).expect(http.StatusNotFound)
}
