package webapi_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
)

func TestSensorLifecycle(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})

	resp := api.request("POST", "/v1/sensors", map[string]any{"id": "xa7v9Dfadr7H", "address": "1 Main St"}).
		expect(http.StatusCreated)
	if got := resp.header.Get("Location"); got != "/v1/sensors/xa7v9Dfadr7H" {
		t.Fatalf("Location = %q", got)
	}
	fields := resp.fields()
	for _, name := range []string{"data", "changed_at", "last_seen"} {
		if v, ok := fields[name]; !ok || v != nil {
			t.Fatalf("%s = %v (present %v), want null", name, v, ok)
		}
	}
	if fields["connection"] != "unknown" {
		t.Fatalf("connection = %v, want unknown", fields["connection"])
	}
	if _, ok := fields["heartbeat_timeout"]; ok {
		t.Fatalf("heartbeat_timeout shown for a sensor without one: %s", resp.body)
	}
	expectUTC(t, fields, "created_at", "updated_at")

	var got sensorJSON
	api.request("GET", "/v1/sensors/xa7v9Dfadr7H", nil).expect(http.StatusOK).decode(&got)
	if got.ID != "xa7v9Dfadr7H" || got.Address != "1 Main St" {
		t.Fatalf("GET = %+v", got)
	}

	// A duplicate id is a conflict, named.
	api.request("POST", "/v1/sensors", map[string]any{"id": "xa7v9Dfadr7H", "address": "elsewhere"}).
		expectProblem(http.StatusConflict, "conflict", "xa7v9Dfadr7H")

	// PATCH changes only what it names.
	var patched sensorJSON
	api.request("PATCH", "/v1/sensors/xa7v9Dfadr7H", map[string]any{"heartbeat_timeout": "90m"}).
		expect(http.StatusOK).decode(&patched)
	if patched.Address != "1 Main St" || patched.HeartbeatTimeout != "1h30m0s" {
		t.Fatalf("after PATCH heartbeat_timeout: %+v", patched)
	}
	api.request("PATCH", "/v1/sensors/xa7v9Dfadr7H", map[string]any{"address": "2 High St"}).
		expect(http.StatusOK).decode(&patched)
	if patched.Address != "2 High St" || patched.HeartbeatTimeout != "1h30m0s" {
		t.Fatalf("after PATCH address: %+v", patched)
	}
	if patched.UpdatedAt.Before(patched.CreatedAt) {
		t.Fatalf("updated_at %v before created_at %v", patched.UpdatedAt, patched.CreatedAt)
	}
	// null returns the sensor to the fleet-wide timeout.
	resp = api.request("PATCH", "/v1/sensors/xa7v9Dfadr7H", `{"heartbeat_timeout": null}`).expect(http.StatusOK)
	if _, ok := resp.fields()["heartbeat_timeout"]; ok {
		t.Fatalf("heartbeat_timeout still shown after null: %s", resp.body)
	}
	// The change is stored, not only echoed.
	api.request("GET", "/v1/sensors/xa7v9Dfadr7H", nil).expect(http.StatusOK).decode(&got)
	if got.Address != "2 High St" || got.HeartbeatTimeout != "" {
		t.Fatalf("GET after PATCH = %+v", got)
	}

	api.request("DELETE", "/v1/sensors/xa7v9Dfadr7H", nil).expect(http.StatusNoContent)
	api.request("GET", "/v1/sensors/xa7v9Dfadr7H", nil).expectProblem(http.StatusNotFound, "not-found", "xa7v9Dfadr7H")
	api.request("DELETE", "/v1/sensors/xa7v9Dfadr7H", nil).expectProblem(http.StatusNotFound, "not-found", "xa7v9Dfadr7H")
	api.request("PATCH", "/v1/sensors/xa7v9Dfadr7H", map[string]any{"address": "x"}).
		expectProblem(http.StatusNotFound, "not-found", "xa7v9Dfadr7H")
	// An id that cannot exist is not found either, without asking the database.
	api.request("GET", "/v1/sensors/not-a-valid-id", nil).expectProblem(http.StatusNotFound, "not-found", "not-a-valid-id")
}

func TestSensorShowsStoredState(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})
	api.createSensor("TestSensor", "Lab door")

	// The consumer owns sensor_state; the test writes a row as it would.
	changedAt := time.Date(2026, 11, 22, 10, 0, 0, 0, time.FixedZone("CET", 3600))
	if err := api.insertSensorState("TestSensor", 1, changedAt); err != nil {
		t.Fatal(err)
	}
	resp := api.request("GET", "/v1/sensors/TestSensor", nil).expect(http.StatusOK)
	var got sensorJSON
	resp.decode(&got)
	if got.Data == nil || *got.Data != 1 || got.ChangedAt == nil || !got.ChangedAt.Equal(changedAt) {
		t.Fatalf("state = data %v changed_at %v, want 1 at %v", got.Data, got.ChangedAt, changedAt)
	}
	expectUTC(t, resp.fields(), "changed_at")
}

func TestSensorValidation(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})

	// Every bad field is named at once.
	p := api.request("POST", "/v1/sensors", map[string]any{"id": "has space", "address": "", "heartbeat_timeout": "30s"}).
		expectInvalid("id", "address", "heartbeat_timeout")
	if p.Detail != "invalid fields: id, address, heartbeat_timeout" {
		t.Fatalf("detail = %q", p.Detail)
	}
	api.request("POST", "/v1/sensors", map[string]any{}).expectInvalid("id", "address")
	api.request("POST", "/v1/sensors", map[string]any{"id": "0123456789aBcDeFx", "address": "x"}).expectInvalid("id")
	api.request("POST", "/v1/sensors", map[string]any{"id": "ok", "address": strings.Repeat("a", 257)}).expectInvalid("address")
	api.request("POST", "/v1/sensors", map[string]any{"id": "ok", "address": "   "}).expectInvalid("address")
	api.request("POST", "/v1/sensors", map[string]any{"id": "ok", "address": "x", "heartbeat_timeout": "169h"}).
		expectInvalid("heartbeat_timeout")
	api.request("POST", "/v1/sensors", map[string]any{"id": "ok", "address": "x", "heartbeat_timeout": "soon"}).
		expectInvalid("heartbeat_timeout")

	// The limits themselves are accepted: 16 characters, 256 of address, 1m and 168h.
	api.request("POST", "/v1/sensors", map[string]any{"id": "0123456789aBcDeF", "address": strings.Repeat("é", 256), "heartbeat_timeout": "1m"}).
		expect(http.StatusCreated)
	api.request("PATCH", "/v1/sensors/0123456789aBcDeF", map[string]any{"heartbeat_timeout": "168h"}).expect(http.StatusOK)
	api.request("PATCH", "/v1/sensors/0123456789aBcDeF", `{"address": null}`).expectInvalid("address")
	api.request("PATCH", "/v1/sensors/0123456789aBcDeF", map[string]any{"address": "", "heartbeat_timeout": "0s"}).
		expectInvalid("address", "heartbeat_timeout")
}

func TestSensorPaging(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})

	// 250 sensors with ids whose byte order is not their creation order.
	const n = 250
	want := make([]string, 0, n)
	for i := range n {
		id := fmt.Sprintf("S%03d", (i*37)%n)
		want = append(want, id)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, id := range want {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			api.createSensor(id, "addr "+id)
		})
	}
	wg.Wait()

	// Default page size is 100, and the last page has no cursor.
	var seen []string
	cursor := ""
	pages := 0
	for {
		path := "/v1/sensors"
		if cursor != "" {
			path += "?cursor=" + cursor
		}
		var page pageJSON[sensorJSON]
		api.request("GET", path, nil).expect(http.StatusOK).decode(&page)
		pages++
		for _, s := range page.Items {
			seen = append(seen, s.ID)
		}
		if page.NextCursor == "" {
			break
		}
		if len(page.Items) != 100 {
			t.Fatalf("page %d has %d items and a cursor, want 100", pages, len(page.Items))
		}
		cursor = page.NextCursor
		if pages > n {
			t.Fatal("paging does not end")
		}
	}
	if pages != 3 || len(seen) != n {
		t.Fatalf("got %d sensors in %d pages, want %d in 3", len(seen), pages, n)
	}
	for i, id := range seen {
		if wantID := fmt.Sprintf("S%03d", i); id != wantID {
			t.Fatalf("item %d = %s, want %s (every id once, in order)", i, id, wantID)
		}
	}

	// A page that ends exactly at the last sensor has no cursor.
	var page pageJSON[sensorJSON]
	api.request("GET", "/v1/sensors?limit=50&cursor="+base64.RawURLEncoding.EncodeToString([]byte("S199")), nil).
		expect(http.StatusOK).decode(&page)
	if len(page.Items) != 50 || page.Items[0].ID != "S200" || page.NextCursor != "" {
		t.Fatalf("last page: %d items from %s, cursor %q", len(page.Items), page.Items[0].ID, page.NextCursor)
	}
	if raw := api.request("GET", "/v1/sensors?limit=1000", nil).expect(http.StatusOK).fields(); raw["next_cursor"] != nil {
		t.Fatalf("next_cursor present on the only page: %v", raw["next_cursor"])
	}

	for _, query := range []string{"limit=0", "limit=1001", "limit=-1", "limit=ten"} {
		api.request("GET", "/v1/sensors?"+query, nil).expectProblem(http.StatusBadRequest, "invalid-parameter", "limit")
	}
	for _, cursor := range []string{"!!!", base64.RawURLEncoding.EncodeToString([]byte("not a sensor id"))} {
		api.request("GET", "/v1/sensors?cursor="+cursor, nil).expectProblem(http.StatusBadRequest, "invalid-parameter", "cursor")
	}
}

// liveness is a SensorStatus answering from a table, standing in for the heartbeat
// (which is another package's work); observed records what SensorObserver was told.
type liveness struct {
	mu       sync.Mutex
	lastSeen map[string]time.Time
	conn     map[string]string
	created  []string
	updated  []string
	deleted  []string
	// lookups is the number of sensors of each SensorStatuses call.
	lookups []int
	fail    bool
}

func (l *liveness) SensorCreated(_ context.Context, id string, createdAt time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if createdAt.IsZero() {
		return fmt.Errorf("sensor %s created at zero time", id)
	}
	l.created = append(l.created, id)
	return nil
}

// LostSensorIDs lists every id whose connection is lost, plus an unregistered one that
// the API must leave out.
func (l *liveness) LostSensorIDs(_ context.Context, page storage.Page) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id, c := range l.conn {
		if c == webapi.ConnectionLost && id > page.After {
			ids = append(ids, id)
		}
	}
	if "lostUnregistered" > page.After {
		ids = append(ids, "lostUnregistered")
	}
	slices.Sort(ids)
	if len(ids) > page.Limit {
		ids = ids[:page.Limit]
	}
	return ids, nil
}

// SensorStatuses answers from the table, leaving out "broken" (a sensor the
// heartbeat cannot say anything of), and fails altogether while fail is set.
func (l *liveness) SensorStatuses(_ context.Context, ids []string) (map[string]webapi.SensorConnection, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lookups = append(l.lookups, len(ids))
	if l.fail {
		return nil, fmt.Errorf("redis is down")
	}
	out := make(map[string]webapi.SensorConnection, len(ids))
	for _, id := range ids {
		if id != "broken" {
			out[id] = webapi.SensorConnection{LastSeen: l.lastSeen[id], Connection: l.conn[id]}
		}
	}
	return out, nil
}

func (l *liveness) SensorUpdated(_ context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.updated = append(l.updated, id)
	return nil
}

func (l *liveness) SensorDeleted(_ context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deleted = append(l.deleted, id)
	return nil
}

func TestSensorStatusSeam(t *testing.T) {
	t.Parallel()
	seen := time.Date(2026, 11, 22, 9, 30, 0, 0, time.FixedZone("X", -5*3600))
	l := &liveness{
		lastSeen: map[string]time.Time{"online": seen, "lost": seen.Add(-2 * time.Hour)},
		conn:     map[string]string{"online": webapi.ConnectionOnline, "lost": webapi.ConnectionLost},
	}
	l.conn["lost2"] = webapi.ConnectionLost
	api := newTestAPI(t, apiOptions{opts: []webapi.Option{webapi.WithSensorStatus(l), webapi.WithSensorObserver(l), webapi.WithLostSensors(l)}})
	for _, id := range []string{"online", "lost", "never", "broken", "lost2", "silentNew"} {
		api.createSensor(id, "somewhere")
	}
	// Every sensor but "never" and "silentNew" has reported.
	for _, id := range []string{"online", "lost", "broken", "lost2"} {
		if err := api.insertSensorState(id, 1, seen); err != nil {
			t.Fatal(err)
		}
	}
	// The heartbeat tracks a registered sensor from its registration: no sighting, so
	// the API shows no last_seen and an unknown connection until it is lost.
	l.mu.Lock()
	l.lastSeen["silentNew"], l.conn["silentNew"] = seen, webapi.ConnectionOnline
	l.mu.Unlock()

	// connection=lost pages through the lost set, showing registered sensors only.
	var lostPage pageJSON[sensorJSON]
	api.request("GET", "/v1/sensors?connection=lost&limit=1", nil).expect(http.StatusOK).decode(&lostPage)
	if len(lostPage.Items) != 1 || lostPage.Items[0].ID != "lost" || lostPage.NextCursor == "" {
		t.Fatalf("first page of lost sensors: %+v", lostPage)
	}
	var rest pageJSON[sensorJSON]
	api.request("GET", "/v1/sensors?connection=lost&limit=5&cursor="+lostPage.NextCursor, nil).expect(http.StatusOK).decode(&rest)
	if len(rest.Items) != 1 || rest.Items[0].ID != "lost2" || rest.NextCursor != "" {
		t.Fatalf("second page of lost sensors (lostUnregistered must be left out): %+v", rest)
	}
	api.request("GET", "/v1/sensors?connection=sideways", nil).expectProblem(http.StatusBadRequest, "invalid-parameter", "connection")

	var page pageJSON[sensorJSON]
	api.request("GET", "/v1/sensors", nil).expect(http.StatusOK).decode(&page)
	got := map[string]sensorJSON{}
	for _, s := range page.Items {
		got[s.ID] = s
	}
	if s := got["online"]; s.Connection != "online" || s.LastSeen == nil || !s.LastSeen.Equal(seen) {
		t.Fatalf("online sensor: %+v", s)
	}
	if s := got["lost"]; s.Connection != "lost" || s.LastSeen == nil {
		t.Fatalf("lost sensor: %+v", s)
	}
	// Never seen, registered but never reported, and a status store that fails:
	// unknown, not an error.
	for _, id := range []string{"never", "broken", "silentNew"} {
		if s := got[id]; s.Connection != "unknown" || s.LastSeen != nil {
			t.Fatalf("%s sensor: %+v", id, s)
		}
	}
	expectUTC(t, api.request("GET", "/v1/sensors/online", nil).expect(http.StatusOK).fields(), "last_seen")

	// One status lookup per page, for the sensors of the page only.
	l.mu.Lock()
	l.lookups = nil
	l.mu.Unlock()
	var firstThree pageJSON[sensorJSON]
	api.request("GET", "/v1/sensors?limit=3", nil).expect(http.StatusOK).decode(&firstThree)
	api.request("GET", "/v1/sensors?connection=lost", nil).expect(http.StatusOK)
	l.mu.Lock()
	if fmt.Sprint(l.lookups) != "[3 2]" {
		t.Fatalf("status lookups of a page of 3 sensors and a page of 2 lost ones: %v, want [3 2]", l.lookups)
	}
	// A status store that fails shows every sensor unknown; the list still answers.
	l.fail = true
	l.mu.Unlock()
	var blind pageJSON[sensorJSON]
	api.request("GET", "/v1/sensors", nil).expect(http.StatusOK).decode(&blind)
	for _, s := range blind.Items {
		if s.Connection != "unknown" || s.LastSeen != nil {
			t.Fatalf("with the status store down, %+v", s)
		}
	}
	l.mu.Lock()
	l.fail = false
	l.mu.Unlock()

	api.request("PATCH", "/v1/sensors/online", map[string]any{"heartbeat_timeout": "2h"}).expect(http.StatusOK)
	api.request("DELETE", "/v1/sensors/lost", nil).expect(http.StatusNoContent)
	// Failed requests tell the observer nothing.
	api.request("PATCH", "/v1/sensors/missing", map[string]any{"heartbeat_timeout": "2h"}).expect(http.StatusNotFound)
	api.request("DELETE", "/v1/sensors/missing", nil).expect(http.StatusNotFound)
	l.mu.Lock()
	defer l.mu.Unlock()
	if fmt.Sprint(l.updated) != "[online]" || fmt.Sprint(l.deleted) != "[lost]" {
		t.Fatalf("observer told updated %v deleted %v, want [online] and [lost]", l.updated, l.deleted)
	}
	if fmt.Sprint(l.created) != "[online lost never broken lost2 silentNew]" {
		t.Fatalf("observer told created %v", l.created)
	}
}

// open_alert_after is set at creation or by PATCH, shown, validated, and turned
// off by null.
func TestSensorOpenAlertAfter(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})
	fields := api.request("POST", "/v1/sensors", map[string]any{"id": "door", "address": "1 Main St", "open_alert_after": "10m"}).
		expect(http.StatusCreated).fields()
	if fields["open_alert_after"] != "10m0s" {
		t.Fatalf("open_alert_after at creation = %v", fields["open_alert_after"])
	}
	fields = api.request("PATCH", "/v1/sensors/door", map[string]any{"open_alert_after": "45s"}).expect(http.StatusOK).fields()
	if fields["open_alert_after"] != "45s" {
		t.Fatalf("open_alert_after after PATCH = %v", fields["open_alert_after"])
	}
	api.request("PATCH", "/v1/sensors/door", map[string]any{"open_alert_after": "0s"}).expectInvalid("open_alert_after")
	api.request("PATCH", "/v1/sensors/door", map[string]any{"open_alert_after": "later"}).expectInvalid("open_alert_after")
	if _, ok := api.request("PATCH", "/v1/sensors/door", `{"open_alert_after": null}`).expect(http.StatusOK).fields()["open_alert_after"]; ok {
		t.Fatal("open_alert_after still shown after null")
	}
	if _, ok := api.request("GET", "/v1/sensors/door", nil).expect(http.StatusOK).fields()["open_alert_after"]; ok {
		t.Fatal("open_alert_after stored after null")
	}
}

// site is set at creation or by PATCH, shown, validated, and removed by null.
func TestSensorSite(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})
	fields := api.request("POST", "/v1/sensors", map[string]any{"id": "door", "address": "1 Main St", "site": "hq-1"}).
		expect(http.StatusCreated).fields()
	if fields["site"] != "hq-1" {
		t.Fatalf("site at creation = %v", fields["site"])
	}
	if fields = api.request("PATCH", "/v1/sensors/door", map[string]any{"site": "shop.2"}).expect(http.StatusOK).fields(); fields["site"] != "shop.2" {
		t.Fatalf("site after PATCH = %v", fields["site"])
	}
	api.request("PATCH", "/v1/sensors/door", map[string]any{"site": ""}).expectInvalid("site")
	api.request("PATCH", "/v1/sensors/door", map[string]any{"site": "has space"}).expectInvalid("site")
	api.request("PATCH", "/v1/sensors/door", `{"site": null}`).expect(http.StatusOK)
	if _, ok := api.request("GET", "/v1/sensors/door", nil).expect(http.StatusOK).fields()["site"]; ok {
		t.Fatal("site stored after null")
	}
}

// PUT /v1/sensors/{id}/maintenance and /v1/sites/{site}/maintenance set the
// window not ended yet, validated.
func TestMaintenanceRoutes(t *testing.T) {
	t.Parallel()
	api := newDeliveryAPI(t, func(s *storagetest.Stores) []webapi.Option {
		return []webapi.Option{webapi.WithMaintenance(heartbeat.NewPostgresStore(s.Postgres))}
	})
	api.createSensor("door", "1 Main St")
	from := time.Now().UTC().Truncate(time.Second)
	window := func(from, to time.Time) map[string]any {
		return map[string]any{"from": from.Format(time.RFC3339), "to": to.Format(time.RFC3339)}
	}
	var got struct {
		ID       string    `json:"id"`
		SensorID string    `json:"sensor_id"`
		Site     string    `json:"site"`
		To       time.Time `json:"to"`
		Silent   []string  `json:"silent"`
	}
	api.request("PUT", "/v1/sensors/door/maintenance", window(from, from.Add(time.Hour))).expect(http.StatusOK).decode(&got)
	first := got.ID
	if got.SensorID != "door" || !got.To.Equal(from.Add(time.Hour)) || got.Silent == nil {
		t.Fatalf("window = %+v", got)
	}
	// PUT again moves the same window.
	api.request("PUT", "/v1/sensors/door/maintenance", window(from, from.Add(2*time.Hour))).expect(http.StatusOK).decode(&got)
	if got.ID != first || !got.To.Equal(from.Add(2*time.Hour)) {
		t.Fatalf("moved window = %+v, want %s until +2h", got, first)
	}
	got.SensorID = ""
	api.request("PUT", "/v1/sites/hq-1/maintenance", window(from, from.Add(time.Hour))).expect(http.StatusOK).decode(&got)
	if got.Site != "hq-1" || got.SensorID != "" {
		t.Fatalf("site window = %+v", got)
	}
	api.request("PUT", "/v1/sensors/door/maintenance", window(from, from.Add(-time.Hour))).expectInvalid("to")
	api.request("PUT", "/v1/sensors/door/maintenance", window(from, from.Add(32*24*time.Hour))).expectInvalid("to")
	api.request("PUT", "/v1/sensors/door/maintenance", map[string]any{}).expectInvalid("from", "to")
	api.request("PUT", "/v1/sensors/ghost/maintenance", window(from, from.Add(time.Hour))).expectProblem(http.StatusNotFound, "not-found")
	api.request("PUT", "/v1/sites/has%20space/maintenance", window(from, from.Add(time.Hour))).expectProblem(http.StatusNotFound, "not-found")
}
