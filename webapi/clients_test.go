package webapi_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/webapi"
)

// expectSecret fails unless secret is a Standard Webhooks secret of 32 bytes.
func expectSecret(t *testing.T, secret string) {
	t.Helper()
	encoded, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		t.Fatalf("secret %q lacks the whsec_ prefix", secret)
	}
	raw, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil || len(raw) != 32 {
		t.Fatalf("secret %q is not base64 of 32 bytes (%d bytes, err %v)", secret, len(raw), err)
	}
}

// expectNoSecret fails if the raw JSON object shows a secret.
func expectNoSecret(t *testing.T, fields map[string]any) {
	t.Helper()
	if v, ok := fields["secret"]; ok {
		t.Fatalf("secret shown where it must not be: %v", v)
	}
}

func TestClientLifecycle(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})

	resp := api.request("POST", "/v1/clients", map[string]any{
		"name":        "Acme",
		"webhook_url": "https://hooks.acme.example/lockstream",
		"email":       "ops@acme.example",
		"push_targets": []map[string]any{
			{"platform": "IOS", "push_key": "d36ae023-010c-4f3a-9bd7-9924a754b4b4"},
			{"platform": "ANDROID", "push_key": "f31690cb-a763-4259-af18-6aed41afd9ed"},
		},
	}).expect(http.StatusCreated)
	var created clientJSON
	resp.decode(&created)
	if created.ID == "" || resp.header.Get("Location") != "/v1/clients/"+created.ID {
		t.Fatalf("id %q, Location %q", created.ID, resp.header.Get("Location"))
	}
	expectSecret(t, created.Secret)
	if created.Name != "Acme" || created.WebhookURL != "https://hooks.acme.example/lockstream" ||
		created.Email == nil || *created.Email != "ops@acme.example" || len(created.PushTargets) != 2 {
		t.Fatalf("created = %+v", created)
	}
	expectUTC(t, resp.fields(), "created_at", "updated_at")

	// The secret is never shown again: not by GET, list or PATCH.
	path := "/v1/clients/" + created.ID
	resp = api.request("GET", path, nil).expect(http.StatusOK)
	expectNoSecret(t, resp.fields())
	var got clientJSON
	resp.decode(&got)
	if got.Name != "Acme" || len(got.PushTargets) != 2 {
		t.Fatalf("GET = %+v", got)
	}
	var list struct {
		Items []map[string]any `json:"items"`
	}
	api.request("GET", "/v1/clients", nil).expect(http.StatusOK).decode(&list)
	if len(list.Items) != 1 {
		t.Fatalf("list has %d clients, want 1", len(list.Items))
	}
	expectNoSecret(t, list.Items[0])

	// PATCH: name only.
	resp = api.request("PATCH", path, map[string]any{"name": "Acme Corp"}).expect(http.StatusOK)
	expectNoSecret(t, resp.fields())
	resp.decode(&got)
	if got.Name != "Acme Corp" || got.Email == nil || len(got.PushTargets) != 2 {
		t.Fatalf("after PATCH name: %+v", got)
	}
	// push_targets replaces them all; email null removes the address.
	api.request("PATCH", path, `{"email": null, "push_targets": [{"platform": "ANDROID", "push_key": "k2"}]}`).
		expect(http.StatusOK).decode(&got)
	if got.Email != nil || !slices.Equal(got.PushTargets, []pushTargetJSON{{Platform: "ANDROID", PushKey: "k2"}}) {
		t.Fatalf("after PATCH email/push_targets: %+v", got)
	}
	// email "" removes too, and a new one can be set; webhook_url changes.
	api.request("PATCH", path, map[string]any{"email": "new@acme.example", "webhook_url": "http://10.0.0.1:8080/hook"}).
		expect(http.StatusOK).decode(&got)
	if got.Email == nil || *got.Email != "new@acme.example" || got.WebhookURL != "http://10.0.0.1:8080/hook" {
		t.Fatalf("after PATCH email/webhook_url: %+v", got)
	}
	api.request("PATCH", path, map[string]any{"email": ""}).expect(http.StatusOK).decode(&got)
	if got.Email != nil {
		t.Fatalf("email %q after PATCH \"\"", *got.Email)
	}
	api.request("PATCH", path, `{"push_targets": null}`).expect(http.StatusOK).decode(&got)
	if len(got.PushTargets) != 0 || got.PushTargets == nil {
		t.Fatalf("push_targets after null = %#v, want []", got.PushTargets)
	}
	// Stored, not only echoed.
	api.request("GET", path, nil).expect(http.StatusOK).decode(&got)
	if got.Name != "Acme Corp" || got.Email != nil || len(got.PushTargets) != 0 || got.WebhookURL != "http://10.0.0.1:8080/hook" {
		t.Fatalf("GET after PATCHes = %+v", got)
	}

	// Rotation shows a new secret, once.
	var rotated clientJSON
	api.request("POST", path+"/secret", nil).expect(http.StatusOK).decode(&rotated)
	expectSecret(t, rotated.Secret)
	if rotated.Secret == created.Secret || rotated.ID != created.ID {
		t.Fatalf("rotation kept the old secret or changed the id: %+v", rotated)
	}
	expectNoSecret(t, api.request("GET", path, nil).expect(http.StatusOK).fields())

	api.request("DELETE", path, nil).expect(http.StatusNoContent)
	for _, r := range []struct{ method, path string }{
		{"GET", path}, {"DELETE", path}, {"POST", path + "/secret"}, {"GET", path + "/sensors"},
	} {
		api.request(r.method, r.path, nil).expectProblem(http.StatusNotFound, "not-found", created.ID)
	}
	api.request("PATCH", path, map[string]any{"name": "x"}).expectProblem(http.StatusNotFound, "not-found", created.ID)
	api.request("GET", "/v1/clients/not-a-uuid", nil).expectProblem(http.StatusNotFound, "not-found", "not-a-uuid")
}

func TestClientValidation(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})

	api.request("POST", "/v1/clients", map[string]any{}).expectInvalid("name", "webhook_url")
	api.request("POST", "/v1/clients", map[string]any{
		"name":        strings.Repeat("n", 201),
		"webhook_url": "ftp://files.example.com/",
		"email":       "not an address",
		"push_targets": []map[string]any{
			{"platform": "WINDOWS", "push_key": ""},
			{"platform": "IOS"},
		},
	}).expectInvalid("name", "webhook_url", "email", "push_targets[0].platform", "push_targets[0].push_key", "push_targets[1].push_key")

	for _, url := range []string{"/relative/path", "https://", "http:///nohost", "mailto:a@b.example", "::not a url"} {
		api.request("POST", "/v1/clients", map[string]any{"name": "x", "webhook_url": url}).expectInvalid("webhook_url")
	}
	for _, email := range []string{"Bob <bob@example.com>", "a@example.com, b@example.com", "@example.com", "bob"} {
		api.request("POST", "/v1/clients", map[string]any{"name": "x", "webhook_url": "https://h.example", "email": email}).
			expectInvalid("email")
	}
	api.request("POST", "/v1/clients", map[string]any{"name": "  ", "webhook_url": "https://h.example"}).expectInvalid("name")
	api.request("POST", "/v1/clients", map[string]any{"name": "x", "webhook_url": "https://h.example",
		"push_targets": []map[string]any{{"platform": "ios", "push_key": "k"}}}).expectInvalid("push_targets[0].platform")

	// A 200-character name, email null and no push targets are fine.
	c := api.request("POST", "/v1/clients", map[string]any{"name": strings.Repeat("ü", 200), "webhook_url": "http://127.0.0.1:9/x", "email": nil}).
		expect(http.StatusCreated)
	var created clientJSON
	c.decode(&created)
	if created.Email != nil || created.PushTargets == nil || len(created.PushTargets) != 0 {
		t.Fatalf("created = %+v, want email null and push_targets []", created)
	}

	path := "/v1/clients/" + created.ID
	api.request("PATCH", path, `{"name": null, "webhook_url": null}`).expectInvalid("name", "webhook_url")
	api.request("PATCH", path, map[string]any{"webhook_url": "nope", "email": "x@", "push_targets": []map[string]any{{}}}).
		expectInvalid("webhook_url", "email", "push_targets[0].platform", "push_targets[0].push_key")
	// Nothing of a refused PATCH is stored.
	var got clientJSON
	api.request("GET", path, nil).expect(http.StatusOK).decode(&got)
	if got.WebhookURL != "http://127.0.0.1:9/x" {
		t.Fatalf("webhook_url = %q after refused PATCH", got.WebhookURL)
	}
}

func TestClientPaging(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})
	var want []string
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		want = append(want, api.createClient(name).ID)
	}
	var seen []string
	cursor := ""
	for range 10 {
		var page pageJSON[map[string]any]
		api.request("GET", "/v1/clients?limit=2&cursor="+cursor, nil).expect(http.StatusOK).decode(&page)
		for _, c := range page.Items {
			expectNoSecret(t, c)
			seen = append(seen, c["id"].(string))
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	// Client ids are time-ordered (UUIDv7), so the listing is creation order.
	if !slices.Equal(seen, want) {
		t.Fatalf("paged ids = %v, want %v", seen, want)
	}
	api.request("GET", "/v1/clients?cursor="+base64.RawURLEncoding.EncodeToString([]byte("S001")), nil).
		expectProblem(http.StatusBadRequest, "invalid-parameter", "cursor")
	api.request("GET", "/v1/clients?limit=5000", nil).expectProblem(http.StatusBadRequest, "invalid-parameter", "limit")
}

// A rotation keeps the secret it replaces for SecretOverlap: the delivery's target
// carries both, so webhooks are signed with both until then; the stored column
// holds neither in plaintext.
func TestSecretRotationKeepsThePreviousSecretForTheOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	api := newTestAPI(t, apiOptions{cfg: webapi.Config{SecretOverlap: 90 * time.Minute}})
	api.createSensor("door1", "Main St 1")
	var created clientJSON
	api.request("POST", "/v1/clients", map[string]any{"name": "Acme", "webhook_url": "https://acme.example/hook"}).
		expect(http.StatusCreated).decode(&created)
	api.request("PUT", "/v1/clients/"+created.ID+"/sensors/door1", nil).expect(http.StatusNoContent)
	data := 1
	if _, err := fanout.NewPostgresStore(api.stores.Postgres).CreateNotifications(ctx, []storage.NotificationInput{{EventID: "e1",
		Type: "state_changed", SensorID: "door1", Data: &data, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	deliveries, err := api.stores.Postgres.ListClientDeliveries(ctx, created.ID, storage.DeliveryFilter{}, storage.Page{Limit: 10})
	if err != nil || len(deliveries) != 1 {
		t.Fatalf("deliveries = %v, %v", deliveries, err)
	}

	before := time.Now()
	var rotated clientJSON
	api.request("POST", "/v1/clients/"+created.ID+"/secret", nil).expect(http.StatusOK).decode(&rotated)
	after := time.Now()
	tg, err := api.stores.Postgres.DeliveryTarget(ctx, deliveries[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Secret != rotated.Secret || tg.PreviousSecret != created.Secret {
		t.Fatalf("after rotation the target signs with the new secret %v and the old one %v",
			tg.Secret == rotated.Secret, tg.PreviousSecret == created.Secret)
	}
	if tg.PreviousSecretUntil.Before(before.Add(90*time.Minute).Truncate(time.Microsecond)) ||
		tg.PreviousSecretUntil.After(after.Add(90*time.Minute)) {
		t.Fatalf("previous secret kept until %v, want 90 minutes after the rotation (%v)", tg.PreviousSecretUntil, before)
	}
}
