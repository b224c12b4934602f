package webapi_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
)

// deliveryJSON is a delivery as the API shows it; pointers tell null.
type deliveryJSON struct {
	ID             string     `json:"id"`
	ClientID       *string    `json:"client_id"`
	NotificationID *string    `json:"notification_id"`
	EventID        *string    `json:"event_id"`
	EventType      *string    `json:"event_type"`
	SensorID       *string    `json:"sensor_id"`
	Channel        string     `json:"channel"`
	Target         *string    `json:"target"`
	State          string     `json:"state"`
	Attempts       int        `json:"attempts"`
	NextAttemptAt  *time.Time `json:"next_attempt_at"`
	LastError      *string    `json:"last_error"`
	LastHTTPStatus *int       `json:"last_http_status"`
	EventAt        time.Time  `json:"event_at"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

type attemptJSON struct {
	Attempt       int       `json:"attempt"`
	Status        string    `json:"status"`
	HTTPStatus    *int      `json:"http_status"`
	ErrorType     *string   `json:"error_type"`
	Error         *string   `json:"error"`
	AnswerCode    *int      `json:"answer_code"`
	AnswerMessage *string   `json:"answer_message"`
	DurationMS    int64     `json:"duration_ms"`
	At            time.Time `json:"at"`
}

type deliveryDetailJSON struct {
	deliveryJSON
	AttemptLog []attemptJSON `json:"attempt_log"`
}

// newDeliveryAPI is newTestAPI with options that need the test's stores.
func newDeliveryAPI(t *testing.T, opts func(*storagetest.Stores) []webapi.Option) *testAPI {
	t.Helper()
	stores := storagetest.New(t)
	reg := prometheus.NewRegistry()
	server, err := webapi.New(webapi.Config{AdminToken: testToken}, stores.Registry, nil, reg, reg,
		slog.New(slog.NewTextHandler(io.Discard, nil)), opts(stores)...)
	if err != nil {
		t.Fatalf("webapi.New: %v", err)
	}
	ts := httptest.NewServer(server.Handler())
	t.Cleanup(ts.Close)
	return &testAPI{t: t, url: ts.URL, stores: stores, registry: reg, server: server}
}

func withDeliveries(stores *storagetest.Stores) []webapi.Option {
	return []webapi.Option{webapi.WithDeliveries(stores.Postgres, stores.Postgres)}
}

// deliveryFixture is an API with an outbox in every state. Client a (webhook and
// email) watches s1 to s4, b (webhook) watches s1, c (webhook and an iOS device)
// watches s3. Events, relative to base (six hours ago): e0 on s4 at base-24h, out
// of the default range; e1 on s1 at base; e2 on s2 at base+1h; e3 on s3 at base+2h;
// then, in a later batch, e4 on s1 at base+3h. Deliveries, by client/event/channel:
//
//	a/e0/webhook, a/e0/email  SENT
//	a/e1/webhook              SENT on its 2nd attempt (a 503, then a 200; both in ClickHouse)
//	a/e1/email                SUPERSEDED by e4 while waiting to be retried
//	a/e2/webhook              FAILED with a 400 (its attempt in ClickHouse)
//	a/e2/email                GIVEN_UP
//	a/e3/webhook              RETRY, due at retryAt
//	a/e3/email                IN_FLIGHT
//	a/e4/webhook, a/e4/email  PENDING
//	b/e1/webhook SENT, b/e4/webhook PENDING, c/e3/webhook and c/e3/swrve IN_FLIGHT
type deliveryFixture struct {
	api           *testAPI
	ctx           context.Context
	base, retryAt time.Time
	a, b, c       clientJSON
	// byKey is every delivery by "client/event/channel" (client a, b or c).
	byKey map[string]storage.Delivery
}

func newDeliveryFixture(t *testing.T) *deliveryFixture {
	t.Helper()
	api := newDeliveryAPI(t, withDeliveries)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	now := time.Now().UTC().Truncate(time.Second)
	f := &deliveryFixture{api: api, ctx: ctx, base: now.Add(-6 * time.Hour), retryAt: now.Add(24 * time.Hour),
		byKey: map[string]storage.Delivery{}}

	for _, s := range []string{"s1", "s2", "s3", "s4"} {
		api.createSensor(s, "Door "+s)
	}
	newClient := func(name string, extra map[string]any, sensors ...string) clientJSON {
		body := map[string]any{"name": name, "webhook_url": "https://hooks.example.com/" + name}
		for k, v := range extra {
			body[k] = v
		}
		var c clientJSON
		api.request("POST", "/v1/clients", body).expect(http.StatusCreated).decode(&c)
		for _, s := range sensors {
			api.request("PUT", "/v1/clients/"+c.ID+"/sensors/"+s, nil).expect(http.StatusNoContent)
		}
		return c
	}
	f.a = newClient("a", map[string]any{"email": "a@example.com"}, "s1", "s2", "s3", "s4")
	f.b = newClient("b", nil, "s1")
	f.c = newClient("c", map[string]any{"push_targets": []map[string]string{{"platform": "IOS", "push_key": "k1"}}}, "s3")
	names := map[string]string{f.a.ID: "a", f.b.ID: "b", f.c.ID: "c"}

	pg := api.stores.Postgres
	one, zero := 1, 0
	if _, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, []storage.NotificationInput{
		{EventID: "e0", Type: "connection_lost", SensorID: "s4", At: f.base.Add(-24 * time.Hour)},
		{EventID: "e1", Type: "state_changed", SensorID: "s1", Data: &one, Previous: &zero, At: f.base},
		{EventID: "e2", Type: "connection_lost", SensorID: "s2", At: f.base.Add(time.Hour)},
		{EventID: "e3", Type: "connection_restored", SensorID: "s3", At: f.base.Add(2 * time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	// A claim time after everything created so far is due, and before retryAt.
	claimAt := time.Now().Add(time.Minute)
	claimed, err := pg.ClaimDeliveries(ctx, claimAt, 100, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 11 {
		t.Fatalf("claimed %d deliveries, want 11", len(claimed))
	}
	for _, d := range claimed {
		f.byKey[names[d.ClientID]+"/"+d.EventID+"/"+string(d.Channel)] = d
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustState := func(want storage.DeliveryState) func(storage.DeliveryState, error) {
		return func(got storage.DeliveryState, err error) {
			t.Helper()
			must(err)
			if got != want {
				t.Fatalf("delivery left %s, want %s", got, want)
			}
		}
	}
	d := f.byKey
	must(storagetest.CompleteDelivery(ctx, pg, d["a/e0/webhook"].ID, 1, 200))
	must(storagetest.CompleteDelivery(ctx, pg, d["a/e0/email"].ID, 1, 0))
	mustState(storage.DeliveryRetry)(storagetest.RescheduleDelivery(ctx, pg, d["a/e1/webhook"].ID, 1, time.Now(), "503 Service Unavailable", 503))
	mustState(storage.DeliveryRetry)(storagetest.RescheduleDelivery(ctx, pg, d["a/e1/email"].ID, 1, f.retryAt, "connection refused", 0))
	must(storagetest.FailDelivery(ctx, pg, d["a/e2/webhook"].ID, 1, "400 Bad Request", 400))
	mustState(storage.DeliveryGivenUp)(storagetest.GiveUpDelivery(ctx, pg, d["a/e2/email"].ID, 1, "550 mailbox unavailable", 0))
	mustState(storage.DeliveryRetry)(storagetest.RescheduleDelivery(ctx, pg, d["a/e3/webhook"].ID, 1, f.retryAt, "503 Service Unavailable", 503))
	must(storagetest.CompleteDelivery(ctx, pg, d["b/e1/webhook"].ID, 1, 204))

	// Only a/e1/webhook is due again; its second attempt succeeds.
	again, err := pg.ClaimDeliveries(ctx, claimAt, 100, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].ID != d["a/e1/webhook"].ID || again[0].Attempts != 2 {
		t.Fatalf("second claim = %+v, want a/e1/webhook's 2nd attempt", again)
	}
	must(storagetest.CompleteDelivery(ctx, pg, again[0].ID, 2, 200))

	created, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, []storage.NotificationInput{
		{EventID: "e4", Type: "state_changed", SensorID: "s1", Data: &zero, Previous: &one, At: f.base.Add(3 * time.Hour)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if created.Superseded[storage.ChannelEmail] != 1 {
		t.Fatalf("e4 superseded %v, want a/e1/email", created.Superseded)
	}
	for _, c := range []clientJSON{f.a, f.b} {
		ds, err := pg.ListClientDeliveries(ctx, c.ID, storage.DeliveryFilter{}, storage.Page{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.EventID == "e4" {
				f.byKey[names[c.ID]+"/e4/"+string(d.Channel)] = d
			}
		}
	}
	if len(f.byKey) != 14 {
		t.Fatalf("%d deliveries, want 14: %v", len(f.byKey), f.byKey)
	}

	api.stores.ReplaceDeliveryAttempts(t,
		f.attempt("a/e1/webhook", 1, storage.DeliveryRetry, 503, "HTTP_STATUS", "503 Service Unavailable", 1500*time.Millisecond, f.base.Add(time.Minute)),
		f.attempt("a/e1/webhook", 2, storage.DeliverySent, 200, "", "", 20*time.Millisecond, f.base.Add(2*time.Minute)),
		f.attempt("a/e2/webhook", 1, storage.DeliveryFailed, 400, "HTTP_STATUS", "400 Bad Request", 35*time.Millisecond, f.base.Add(time.Hour+time.Minute)),
		swrveAnswer(f.attempt("c/e3/swrve", 1, storage.DeliveryRetry, 429, "SWRVE", "swrve answered 429", time.Millisecond,
			f.base.Add(3*time.Hour+time.Minute)), 429, "Too Many Requests"),
	)
	return f
}

func (f *deliveryFixture) attempt(key string, n int, status storage.DeliveryState, httpStatus int, errType, errText string,
	took time.Duration, at time.Time) storage.DeliveryAttempt {
	d := f.byKey[key]
	return storage.DeliveryAttempt{DeliveryID: d.ID, ClientID: d.ClientID, SensorID: d.SensorID, EventID: d.EventID,
		Channel: d.Channel, Attempt: n, Status: status, HTTPStatus: httpStatus, ErrorType: errType, Error: errText,
		Duration: took, At: at}
}

// swrveAnswer gives a an answer body's code and message, as Swrve's carry.
func swrveAnswer(a storage.DeliveryAttempt, code int, message string) storage.DeliveryAttempt {
	a.AnswerCode, a.AnswerMessage = code, message
	return a
}

// id returns the id of the delivery with that key.
func (f *deliveryFixture) id(key string) string {
	f.api.t.Helper()
	d, ok := f.byKey[key]
	if !ok {
		f.api.t.Fatalf("no delivery %s", key)
	}
	return d.ID
}

// list reads every page of a client's deliveries with query (limit and cursor
// added), checking that no page is longer than limit and that only the last one
// lacks a cursor.
func (f *deliveryFixture) list(clientID, query string, limit int) []deliveryJSON {
	f.api.t.Helper()
	var all []deliveryJSON
	for cursor := ""; ; {
		v, err := url.ParseQuery(query)
		if err != nil {
			f.api.t.Fatal(err)
		}
		v.Set("limit", fmt.Sprint(limit))
		if cursor != "" {
			v.Set("cursor", cursor)
		}
		var page pageJSON[deliveryJSON]
		f.api.request("GET", "/v1/clients/"+clientID+"/deliveries?"+v.Encode(), nil).expect(http.StatusOK).decode(&page)
		if len(page.Items) > limit || page.NextCursor != "" && len(page.Items) != limit {
			f.api.t.Fatalf("page of %d items with limit %d and cursor %q", len(page.Items), limit, page.NextCursor)
		}
		all = append(all, page.Items...)
		if page.NextCursor == "" {
			return all
		}
		cursor = page.NextCursor
	}
}

// keys names the deliveries by "client/event/channel".
func (f *deliveryFixture) keys(ds []deliveryJSON) []string {
	f.api.t.Helper()
	byID := map[string]string{}
	for k, d := range f.byKey {
		byID[d.ID] = k
	}
	out := make([]string, len(ds))
	for i, d := range ds {
		k, ok := byID[d.ID]
		if !ok {
			f.api.t.Fatalf("listed an unknown delivery %s", d.ID)
		}
		out[i] = k
	}
	return out
}

func sortedKeys(keys []string) []string {
	return slices.Sorted(slices.Values(keys))
}

func TestListClientDeliveries(t *testing.T) {
	t.Parallel()
	f := newDeliveryFixture(t)

	// The default range is the last 24 hours of event time: e0 is out. Newest
	// first: e4's deliveries were created last.
	all := f.list(f.a.ID, "", 100)
	keys := f.keys(all)
	want := []string{"a/e1/email", "a/e1/webhook", "a/e2/email", "a/e2/webhook", "a/e3/email", "a/e3/webhook",
		"a/e4/email", "a/e4/webhook"}
	if got := sortedKeys(keys); !slices.Equal(got, want) {
		t.Fatalf("deliveries = %v, want %v", got, want)
	}
	ids := make([]string, len(all))
	for i, d := range all {
		ids[i] = d.ID
	}
	for i := 1; i < len(ids); i++ {
		if ids[i-1] <= ids[i] {
			t.Fatalf("ids are not strictly newest first: %v", ids)
		}
	}
	if got := sortedKeys(keys[:2]); !slices.Equal(got, []string{"a/e4/email", "a/e4/webhook"}) {
		t.Fatalf("newest two = %v, want e4's", got)
	}

	// Pages of 3 walk the same list, in the same order.
	if paged := f.list(f.a.ID, "", 3); !slices.Equal(f.keys(paged), keys) {
		t.Fatalf("paged by 3 = %v, want %v", f.keys(paged), keys)
	}
	var first pageJSON[deliveryJSON]
	f.api.request("GET", "/v1/clients/"+f.a.ID+"/deliveries?limit=8", nil).expect(http.StatusOK).decode(&first)
	if len(first.Items) != 8 || first.NextCursor != "" {
		t.Fatalf("limit 8 of 8: %d items, cursor %q; want all and no cursor", len(first.Items), first.NextCursor)
	}

	// One item in full, and nulls present as null.
	byKey := map[string]deliveryJSON{}
	for i, d := range all {
		byKey[keys[i]] = d
	}
	sent := byKey["a/e1/webhook"]
	stored := f.byKey["a/e1/webhook"]
	if sent.ID != stored.ID || deref(sent.ClientID) != f.a.ID || deref(sent.NotificationID) != stored.NotificationID ||
		stored.NotificationID == "" || deref(sent.EventID) != "e1" || deref(sent.EventType) != "state_changed" ||
		deref(sent.SensorID) != "s1" || sent.Channel != "webhook" || sent.Target != nil || sent.State != "SENT" ||
		sent.Attempts != 2 || sent.NextAttemptAt != nil || sent.LastError != nil || deref(sent.LastHTTPStatus) != 200 ||
		!sent.EventAt.Equal(f.base) || sent.CreatedAt.IsZero() || sent.UpdatedAt.Before(sent.CreatedAt) {
		t.Fatalf("a/e1/webhook = %+v", sent)
	}
	if email := byKey["a/e1/email"]; deref(email.NotificationID) != deref(sent.NotificationID) || email.Channel != "email" ||
		email.State != "SUPERSEDED" || deref(email.LastError) == "" {
		t.Fatalf("a/e1/email = %+v, want SUPERSEDED, the same notification as the webhook", email)
	}
	if failed := byKey["a/e2/webhook"]; failed.State != "FAILED" || deref(failed.LastError) != "400 Bad Request" ||
		deref(failed.LastHTTPStatus) != 400 || failed.Attempts != 1 || failed.NextAttemptAt != nil {
		t.Fatalf("a/e2/webhook = %+v", failed)
	}
	if retry := byKey["a/e3/webhook"]; retry.State != "RETRY" || retry.NextAttemptAt == nil ||
		!retry.NextAttemptAt.Equal(f.retryAt) || deref(retry.LastHTTPStatus) != 503 {
		t.Fatalf("a/e3/webhook = %+v, want RETRY due at %s", retry, f.retryAt)
	}
	if inFlight := byKey["a/e3/email"]; inFlight.State != "IN_FLIGHT" || inFlight.NextAttemptAt != nil || inFlight.Attempts != 1 {
		t.Fatalf("a/e3/email = %+v", inFlight)
	}
	if pending := byKey["a/e4/webhook"]; pending.State != "PENDING" || pending.NextAttemptAt == nil ||
		pending.Attempts != 0 || pending.LastHTTPStatus != nil || pending.LastError != nil {
		t.Fatalf("a/e4/webhook = %+v", pending)
	}
	var raw pageJSON[map[string]any]
	f.api.request("GET", "/v1/clients/"+f.a.ID+"/deliveries", nil).expect(http.StatusOK).decode(&raw)
	for _, item := range raw.Items {
		for _, name := range []string{"target", "next_attempt_at", "last_error", "last_http_status"} {
			if _, ok := item[name]; !ok {
				t.Fatalf("item without %s: %v", name, item)
			}
		}
		expectUTC(t, item, "event_at", "created_at", "updated_at")
		if item["state"] == "PENDING" {
			expectUTC(t, item, "next_attempt_at")
		}
	}

	// status keeps one state; every state is a valid filter.
	counts := map[string]int{"SCHEDULED": 0, "PENDING": 2, "IN_FLIGHT": 1, "RETRY": 1, "SENT": 1, "FAILED": 1,
		"GIVEN_UP": 1, "SUPERSEDED": 1}
	for state, n := range counts {
		got := f.list(f.a.ID, "status="+state, 100)
		if len(got) != n {
			t.Errorf("status=%s: %v, want %d", state, f.keys(got), n)
		}
		for _, d := range got {
			if d.State != state {
				t.Errorf("status=%s listed a %s delivery", state, d.State)
			}
		}
	}
	// from inclusive, to exclusive, on event time; with status too.
	ranged := f.list(f.a.ID, "from="+f.base.Add(time.Hour).Format(time.RFC3339)+"&to="+f.base.Add(3*time.Hour).Format(time.RFC3339), 100)
	if got := sortedKeys(f.keys(ranged)); !slices.Equal(got, []string{"a/e2/email", "a/e2/webhook", "a/e3/email", "a/e3/webhook"}) {
		t.Fatalf("deliveries in [base+1h, base+3h) = %v", got)
	}
	wide := "from=" + f.base.Add(-30*time.Hour).Format(time.RFC3339)
	if got := sortedKeys(f.keys(f.list(f.a.ID, wide+"&status=SENT", 2))); !slices.Equal(got, []string{"a/e0/email", "a/e0/webhook", "a/e1/webhook"}) {
		t.Fatalf("SENT since base-30h = %v", got)
	}

	// Each client sees its own; the device of a swrve delivery is its target.
	if got := f.keys(f.list(f.b.ID, "", 100)); !slices.Equal(got, []string{"b/e4/webhook", "b/e1/webhook"}) {
		t.Fatalf("b's deliveries = %v, want b/e4/webhook b/e1/webhook", got)
	}
	cs := f.list(f.c.ID, "", 100)
	if got := sortedKeys(f.keys(cs)); !slices.Equal(got, []string{"c/e3/swrve", "c/e3/webhook"}) {
		t.Fatalf("c's deliveries = %v", got)
	}
	for _, d := range cs {
		if d.Channel == "swrve" && deref(d.Target) != "IOS:k1" || d.Channel == "webhook" && d.Target != nil {
			t.Fatalf("c's %s delivery has target %v", d.Channel, d.Target)
		}
	}
}

func TestListClientDeliveriesBadRequests(t *testing.T) {
	t.Parallel()
	api := newDeliveryAPI(t, withDeliveries)
	c := api.createClient("c")
	path := "/v1/clients/" + c.ID + "/deliveries"
	for _, tc := range []struct {
		name, query string
		detail      []string
	}{
		{"unknown status", "?status=DELIVERED", []string{"status", "DELIVERED", "GIVEN_UP"}},
		{"lower-case status", "?status=sent", []string{"status", "sent"}},
		{"from not RFC 3339", "?from=yesterday", []string{"from", "yesterday"}},
		{"from after to", "?from=2026-11-22T10:00:00Z&to=2026-11-22T09:00:00Z", []string{"from", "before"}},
		{"range over 31 days", "?from=2026-10-01T00:00:00Z&to=2026-11-22T00:00:00Z", []string{"31 days"}},
		{"limit zero", "?limit=0", []string{"limit"}},
		{"limit too large", "?limit=1001", []string{"limit", "1001"}},
		{"cursor not base64", "?cursor=!!", []string{"cursor"}},
		{"cursor not a delivery id", "?cursor=" + base64.RawURLEncoding.EncodeToString([]byte("s1")), []string{"cursor"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := *api
			api.t = t
			api.request("GET", path+tc.query, nil).expectProblem(http.StatusBadRequest, "invalid-parameter", tc.detail...)
		})
	}
	// A client with no deliveries: an empty list, not null.
	if items, ok := api.request("GET", path, nil).expect(http.StatusOK).fields()["items"].([]any); !ok || len(items) != 0 {
		t.Fatal("a client without deliveries: want an empty items array")
	}
	api.request("GET", "/v1/clients/0190f4a0-0000-7000-8000-000000000000/deliveries", nil).
		expectProblem(http.StatusNotFound, "not-found", "0190f4a0-0000-7000-8000-000000000000")
	api.request("GET", "/v1/clients/nope/deliveries", nil).expectProblem(http.StatusNotFound, "not-found", "nope")
	api.request("GET", path, nil, "Authorization", "").expectProblem(http.StatusUnauthorized, "unauthorized")
}

func TestGetDelivery(t *testing.T) {
	t.Parallel()
	f := newDeliveryFixture(t)
	id := f.id("a/e1/webhook")

	var got deliveryDetailJSON
	resp := f.api.request("GET", "/v1/deliveries/"+id, nil).expect(http.StatusOK)
	resp.decode(&got)
	if got.ID != id || got.State != "SENT" || got.Attempts != 2 || deref(got.EventID) != "e1" || deref(got.ClientID) != f.a.ID ||
		got.Channel != "webhook" || deref(got.LastHTTPStatus) != 200 {
		t.Fatalf("delivery = %+v", got.deliveryJSON)
	}
	if len(got.AttemptLog) != 2 {
		t.Fatalf("attempt log = %+v, want 2 attempts", got.AttemptLog)
	}
	first, second := got.AttemptLog[0], got.AttemptLog[1]
	if first.Attempt != 1 || first.Status != "RETRY" || deref(first.HTTPStatus) != 503 || deref(first.ErrorType) != "HTTP_STATUS" ||
		deref(first.Error) != "503 Service Unavailable" || first.DurationMS != 1500 || !first.At.Equal(f.base.Add(time.Minute)) {
		t.Errorf("attempt 1 = %+v", first)
	}
	if second.Attempt != 2 || second.Status != "SENT" || deref(second.HTTPStatus) != 200 || second.ErrorType != nil ||
		second.Error != nil || second.DurationMS != 20 || !second.At.Equal(f.base.Add(2*time.Minute)) {
		t.Errorf("attempt 2 = %+v", second)
	}
	var raw struct {
		AttemptLog []map[string]any `json:"attempt_log"`
	}
	resp.decode(&raw)
	if v, ok := raw.AttemptLog[1]["error"]; !ok || v != nil {
		t.Fatalf("a sent attempt's error = %v (present %v), want null", v, ok)
	}
	expectUTC(t, raw.AttemptLog[0], "at")

	// The UUID in capitals names the same delivery, and finds its attempts.
	var upper deliveryDetailJSON
	f.api.request("GET", "/v1/deliveries/"+strings.ToUpper(id), nil).expect(http.StatusOK).decode(&upper)
	if upper.ID != id || len(upper.AttemptLog) != 2 {
		t.Fatalf("by the capitalised id: %s with %d attempts, want %s with 2", upper.ID, len(upper.AttemptLog), id)
	}

	// Attempts are the delivery's own; none yet is an empty log, not null.
	var failed deliveryDetailJSON
	f.api.request("GET", "/v1/deliveries/"+f.id("a/e2/webhook"), nil).expect(http.StatusOK).decode(&failed)
	if failed.State != "FAILED" || len(failed.AttemptLog) != 1 || failed.AttemptLog[0].Status != "FAILED" {
		t.Fatalf("a/e2/webhook = %+v", failed)
	}
	pending := f.api.request("GET", "/v1/deliveries/"+f.id("a/e4/webhook"), nil).expect(http.StatusOK)
	if log, ok := pending.fields()["attempt_log"].([]any); !ok || len(log) != 0 {
		t.Fatalf("a pending delivery: %s, want an empty attempt_log", pending.body)
	}
	var swrve deliveryDetailJSON
	f.api.request("GET", "/v1/deliveries/"+f.id("c/e3/swrve"), nil).expect(http.StatusOK).decode(&swrve)
	if swrve.Channel != "swrve" || deref(swrve.Target) != "IOS:k1" || swrve.State != "IN_FLIGHT" {
		t.Fatalf("c/e3/swrve = %+v", swrve.deliveryJSON)
	}
	if len(swrve.AttemptLog) != 1 || deref(swrve.AttemptLog[0].AnswerCode) != 429 ||
		deref(swrve.AttemptLog[0].AnswerMessage) != "Too Many Requests" {
		t.Fatalf("c/e3/swrve attempt log = %+v, want Swrve's 429 and message", swrve.AttemptLog)
	}
	if a := got.AttemptLog[0]; a.AnswerCode != nil || a.AnswerMessage != nil {
		t.Errorf("a webhook attempt shows answer %v %v, want null", a.AnswerCode, a.AnswerMessage)
	}

	f.api.request("GET", "/v1/deliveries/0190f4a0-0000-7000-8000-000000000000", nil).
		expectProblem(http.StatusNotFound, "not-found", "0190f4a0-0000-7000-8000-000000000000")
	f.api.request("GET", "/v1/deliveries/nope", nil).expectProblem(http.StatusNotFound, "not-found", "nope")
	f.api.request("GET", "/v1/deliveries/"+id, nil, "Authorization", "Bearer wrong").expectProblem(http.StatusUnauthorized, "unauthorized")
}

func TestRetryDelivery(t *testing.T) {
	t.Parallel()
	f := newDeliveryFixture(t)

	// FAILED and GIVEN_UP come back PENDING, due now, with a fresh budget.
	for _, key := range []string{"a/e2/webhook", "a/e2/email"} {
		id := f.id(key)
		resp := f.api.request("POST", "/v1/deliveries/"+id+"/retry", nil).expect(http.StatusAccepted)
		var d deliveryJSON
		resp.decode(&d)
		if d.ID != id || d.State != "PENDING" || d.Attempts != 0 || d.NextAttemptAt == nil || d.NextAttemptAt.After(time.Now().Add(time.Minute)) {
			t.Fatalf("retried %s = %+v, want PENDING, due now, 0 attempts", key, d)
		}
		if loc := resp.header.Get("Location"); loc != "/v1/deliveries/"+id {
			t.Fatalf("Location = %q", loc)
		}
		var detail deliveryDetailJSON
		f.api.request("GET", "/v1/deliveries/"+id, nil).expect(http.StatusOK).decode(&detail)
		if detail.State != "PENDING" {
			t.Fatalf("%s after retry is %s", key, detail.State)
		}
		if key == "a/e2/webhook" && len(detail.AttemptLog) != 1 {
			t.Fatalf("the retry lost the attempt log: %+v", detail.AttemptLog)
		}
	}
	// A retrier takes them up again, as first attempts.
	claimed, err := f.api.stores.Postgres.ClaimDeliveries(f.ctx, time.Now().Add(time.Minute), 100, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var retriedIDs []string
	for _, d := range claimed {
		if d.EventID == "e2" {
			retriedIDs = append(retriedIDs, d.ID)
			if d.Attempts != 1 {
				t.Fatalf("retried delivery claimed as attempt %d, want 1", d.Attempts)
			}
		}
	}
	if len(retriedIDs) != 2 {
		t.Fatalf("claimed %+v, want both retried e2 deliveries among them", claimed)
	}

	// Every other state is a 409 naming it, and stays as it was.
	for key, state := range map[string]string{
		"a/e1/webhook": "SENT", "a/e1/email": "SUPERSEDED", "a/e3/webhook": "RETRY", "a/e3/email": "IN_FLIGHT",
		"a/e2/webhook": "IN_FLIGHT", "b/e4/webhook": "IN_FLIGHT", "a/e0/email": "SENT",
	} {
		id := f.id(key)
		f.api.request("POST", "/v1/deliveries/"+id+"/retry", nil).expectProblem(http.StatusConflict, "conflict", id, state, "FAILED and GIVEN_UP")
		var d deliveryJSON
		f.api.request("GET", "/v1/deliveries/"+id, nil).expect(http.StatusOK).decode(&d)
		if d.State != state {
			t.Fatalf("%s after a refused retry is %s, want %s", key, d.State, state)
		}
	}
	// a/e4 are PENDING behind nothing, so the claim above took them: retry a
	// PENDING one from a fresh outbox row instead.
	if _, err := fanout.NewPostgresStore(f.api.stores.Postgres).CreateNotifications(f.ctx, []storage.NotificationInput{
		{EventID: "e5", Type: "connection_lost", SensorID: "s2", At: f.base.Add(4 * time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	pending := f.list(f.a.ID, "status=PENDING", 100)
	if len(pending) == 0 {
		t.Fatal("no PENDING delivery to refuse a retry of")
	}
	f.api.request("POST", "/v1/deliveries/"+pending[0].ID+"/retry", nil).expectProblem(http.StatusConflict, "conflict", "PENDING")

	f.api.request("POST", "/v1/deliveries/0190f4a0-0000-7000-8000-000000000000/retry", nil).
		expectProblem(http.StatusNotFound, "not-found", "0190f4a0-0000-7000-8000-000000000000")
	f.api.request("POST", "/v1/deliveries/nope/retry", nil).expectProblem(http.StatusNotFound, "not-found", "nope")
	f.api.request("POST", "/v1/deliveries/"+f.id("a/e1/webhook")+"/retry", nil, "Authorization", "").
		expectProblem(http.StatusUnauthorized, "unauthorized")
}

func TestDeliveriesDisabled(t *testing.T) {
	t.Parallel()
	id := "0190f4a0-0000-7000-8000-000000000000"

	// Without WithDeliveries every route answers 503.
	off := newTestAPI(t, apiOptions{})
	off.request("GET", "/v1/clients/"+id+"/deliveries", nil).expectProblem(http.StatusServiceUnavailable, "unavailable", "deliveries")
	off.request("GET", "/v1/deliveries/"+id, nil).expectProblem(http.StatusServiceUnavailable, "unavailable", "deliveries")
	off.request("POST", "/v1/deliveries/"+id+"/retry", nil).expectProblem(http.StatusServiceUnavailable, "unavailable", "deliveries")

	// Without the attempt log only the detail does.
	noLog := newDeliveryAPI(t, func(s *storagetest.Stores) []webapi.Option {
		return []webapi.Option{webapi.WithDeliveries(s.Postgres, nil)}
	})
	c := noLog.createClient("c")
	noLog.request("GET", "/v1/clients/"+c.ID+"/deliveries", nil).expect(http.StatusOK)
	noLog.request("GET", "/v1/deliveries/"+id, nil).expectProblem(http.StatusServiceUnavailable, "unavailable", "attempts")
	noLog.request("POST", "/v1/deliveries/"+id+"/retry", nil).expectProblem(http.StatusNotFound, "not-found")
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
