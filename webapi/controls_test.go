package webapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
)

// controlsRetention is the outbox retention the controls API is given.
const controlsRetention = 90 * 24 * time.Hour

func controlsAPI(t *testing.T) *testAPI {
	t.Helper()
	return newDeliveryAPI(t, func(s *storagetest.Stores) []webapi.Option {
		return []webapi.Option{webapi.WithDeliveryControls(s.Postgres, controlsRetention)}
	})
}

// Subscriptions and rate limits are set, shown and validated; null resets them.
func TestClientSubscriptionsAndRateLimit(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})
	resp := api.request("POST", "/v1/clients", map[string]any{"name": "subs", "webhook_url": "https://hooks.example.com/s",
		"event_types": []string{"connection_lost", "connection_restored"}, "rate_limit": 5}).expect(http.StatusCreated)
	f := resp.fields()
	id := f["id"].(string)
	if types, _ := f["event_types"].([]any); len(types) != 2 || f["rate_limit"] != float64(5) {
		t.Fatalf("created: event_types %v, rate_limit %v", f["event_types"], f["rate_limit"])
	}
	if e, _ := f["endpoint"].(map[string]any); e["state"] != "enabled" || e["failures"] != float64(0) {
		t.Fatalf("created: endpoint %v", f["endpoint"])
	}
	api.request("PATCH", "/v1/clients/"+id, map[string]any{"event_types": []string{}, "rate_limit": 0}).
		expectInvalid("event_types", "rate_limit")
	api.request("PATCH", "/v1/clients/"+id, map[string]any{"event_types": []string{"state_changed", "opened", "state_changed"}}).
		expectInvalid("event_types[1]", "event_types[2]")
	f = api.request("PATCH", "/v1/clients/"+id, map[string]any{"event_types": nil, "rate_limit": nil}).expect(http.StatusOK).fields()
	if f["event_types"] != nil || f["rate_limit"] != nil {
		t.Fatalf("after resetting: event_types %v, rate_limit %v; want null, null", f["event_types"], f["rate_limit"])
	}
	f = api.request("PATCH", "/v1/clients/"+id, map[string]any{"event_types": []string{"state_changed"}}).expect(http.StatusOK).fields()
	if types, _ := f["event_types"].([]any); len(types) != 1 || types[0] != "state_changed" {
		t.Fatalf("after subscribing: event_types %v", f["event_types"])
	}
}

// Recover validates its body, bounds since by the retention, answers with the
// count; the endpoint routes show and enable an endpoint.
func TestRecoverAndEndpointRoutes(t *testing.T) {
	t.Parallel()
	api := controlsAPI(t)
	c := api.createClient("ctl")
	path := "/v1/clients/" + c.ID
	api.request("POST", path+"/deliveries/recover", map[string]any{"states": []string{"SENT"}}).
		expectInvalid("since", "states[0]")
	var res struct {
		Recovered, Superseded int
		Since                 time.Time
	}
	// A since older than the retention is raised to now − retention: bracket
	// "now" by the clock read before and after the call.
	const retention = controlsRetention
	before := time.Now().Truncate(time.Second)
	api.request("POST", path+"/deliveries/recover", map[string]any{"since": "2000-01-01T00:00:00Z"}).
		expect(http.StatusAccepted).decode(&res)
	after := time.Now()
	if res.Recovered != 0 || res.Since.Before(before.Add(-retention)) || res.Since.After(after.Add(-retention)) {
		t.Fatalf("recover of nothing: %+v; since must be raised to now − %s (between %s and %s)",
			res, retention, before.Add(-retention), after.Add(-retention))
	}
	api.request("POST", "/v1/clients/01a2139f-2d98-77de-b0b4-28ffad389d12/deliveries/recover",
		map[string]any{"since": "2026-01-01T00:00:00Z"}).expectProblem(http.StatusNotFound, "not-found")

	e := api.request("GET", path+"/endpoint", nil).expect(http.StatusOK).fields()
	if e["state"] != "enabled" || e["webhook_url"] != c.WebhookURL {
		t.Fatalf("endpoint: %v", e)
	}
	ctx := context.Background()
	if _, err := api.stores.Postgres.RecordWebhookHealth(ctx, []storage.WebhookOutcome{{ClientID: c.ID, At: time.Now().Add(-time.Hour)}}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := api.stores.Postgres.DisableFailingEndpoints(ctx, time.Now(), time.Minute, 1); err != nil {
		t.Fatal(err)
	}
	e = api.request("GET", path+"/endpoint", nil).expect(http.StatusOK).fields()
	if events, _ := e["events"].([]any); e["state"] != "disabled" || len(events) != 1 {
		t.Fatalf("disabled endpoint: %v", e)
	}
	if got := api.request("POST", path+"/endpoint/enable", nil).expect(http.StatusOK).fields(); got["state"] != "enabled" {
		t.Fatalf("enable answered %v", got)
	}
	if f := api.request("GET", path, nil).expect(http.StatusOK).fields(); f["endpoint"].(map[string]any)["state"] != "enabled" {
		t.Fatalf("client after enabling: %v", f["endpoint"])
	}
}

// Without WithDeliveryControls the routes answer 503.
func TestDeliveryControlsDisabled(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})
	c := api.createClient("noctl")
	api.request("POST", "/v1/clients/"+c.ID+"/endpoint/enable", nil).expectProblem(http.StatusServiceUnavailable, "unavailable")
}
