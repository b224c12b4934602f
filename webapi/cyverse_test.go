package webapi_test

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
	"github.com/lockstream/lockstream/webapi/live"
)

// The tests of the CyVerse notification API v1: each answers the examples of the
// cyverse-de/notification-agent README (README.markdown) in their shape, through
// the HTTP handler, over a real Postgres.

const v1Token = "test-v1-token-0123456789abcdef"

// v1Old is the sensor event's time: long before any free-form notification,
// which is recorded at now(), whatever the date the test runs.
var v1Old = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)

// v1Fixture is a server with members and the v1 token, and a member "ipctest"
// (the README's user) with four messages, oldest first: a sensor event
// (state_changed, seq 1), data "upload done" (message a string), analysis
// "cat_06221137 completed" (message an object), data "second upload" (no
// message). other is a member of the same client without a username, with the
// sensor event only.
type v1Fixture struct {
	*testAPI
	ipctest, other memberJSON
}

func newV1Fixture(t *testing.T) *v1Fixture {
	t.Helper()
	stores := storagetest.New(t)
	reg := prometheus.NewRegistry()
	server, err := webapi.New(webapi.Config{AdminToken: testToken, V1Token: v1Token}, stores.Registry, nil, reg, reg,
		slog.New(slog.NewTextHandler(io.Discard, nil)),
		webapi.WithInbox(stores.Registry, live.NewPostgresStore(stores.Postgres), stores.Redis, webapi.InboxConfig{}))
	if err != nil {
		t.Fatalf("webapi.New: %v", err)
	}
	ts := httptest.NewServer(server.Handler())
	t.Cleanup(ts.Close)
	f := &v1Fixture{testAPI: &testAPI{t: t, url: ts.URL, stores: stores, registry: reg, server: server}}

	f.createSensor("door1", "1 Main Street")
	c := f.createClient("cyverse")
	f.request("PUT", "/v1/clients/"+c.ID+"/sensors/door1", nil).expect(http.StatusNoContent)
	f.ipctest = f.createMember(c.ID, map[string]any{"name": "IPC Test", "username": "ipctest"})
	f.other = f.createMember(c.ID, map[string]any{"name": "Other"})
	f.fanout(changed("v1-e1", "door1", 0, v1Old))
	f.notify("data", "upload done", "a.txt uploaded")
	f.notify("analysis", "cat_06221137 completed", map[string]any{"action": "job_status_change", "name": "cat_06221137"})
	f.notify("data", "second upload", nil)
	return f
}

// notify records a free-form notification for ipctest.
func (f *v1Fixture) notify(typ, subject string, message any) {
	f.t.Helper()
	body := map[string]any{"member_id": f.ipctest.ID, "type": typ, "subject": subject}
	if message != nil {
		body["message"] = message
	}
	f.request("POST", "/v1/notifications", body).expect(http.StatusAccepted)
}

// v1 sends a v1 request with the v1 token.
func (f *v1Fixture) v1(method, path string, body any) *response {
	f.t.Helper()
	return f.request(method, path, body, "Authorization", "Bearer "+v1Token)
}

// v1MessageJSON is a message of the v1 API.
type v1MessageJSON struct {
	Deleted bool `json:"deleted"`
	Message struct {
		ID        string `json:"id"`
		Text      string `json:"text"`
		Timestamp int64  `json:"timestamp"`
	} `json:"message"`
	Payload map[string]any `json:"payload"`
	Seen    bool           `json:"seen"`
	Subject string         `json:"subject"`
	Type    string         `json:"type"`
	User    string         `json:"user"`
}

type v1ListJSON struct {
	Messages []v1MessageJSON `json:"messages"`
	Total    string          `json:"total"`
}

// list GETs a v1 list and checks its shape: "messages" an array, "total" a
// string, each message with the README's fields and JSON types.
func (f *v1Fixture) list(path string) v1ListJSON {
	f.t.Helper()
	resp := f.v1("GET", path, nil).expect(http.StatusOK)
	var raw struct {
		Messages []map[string]any `json:"messages"`
		Total    any              `json:"total"`
	}
	resp.decode(&raw)
	if _, ok := raw.Total.(string); !ok || raw.Messages == nil {
		f.t.Fatalf("GET %s: total %T (want a string), messages %v; body %s", path, raw.Total, raw.Messages, resp.body)
	}
	for _, m := range raw.Messages {
		expectV1MessageShape(f.t, m)
	}
	var out v1ListJSON
	resp.decode(&out)
	return out
}

// expectV1MessageShape checks one message against the README's example: the
// fields and their JSON types, the timestamp in milliseconds.
func expectV1MessageShape(t *testing.T, m map[string]any) {
	t.Helper()
	kinds := map[string]string{"deleted": "bool", "message": "object", "payload": "object", "seen": "bool",
		"type": "string", "user": "string"}
	for field, kind := range kinds {
		if jsonKind(m[field]) != kind {
			t.Fatalf("message field %q = %#v, want a JSON %s; message %v", field, m[field], kind, m)
		}
	}
	inner := m["message"].(map[string]any)
	if jsonKind(inner["id"]) != "string" || jsonKind(inner["text"]) != "string" || jsonKind(inner["timestamp"]) != "number" {
		t.Fatalf("message.message = %v, want id and text strings and a numeric timestamp", inner)
	}
	if _, err := uuid.Parse(inner["id"].(string)); err != nil || inner["id"] != strings.ToUpper(inner["id"].(string)) {
		t.Fatalf("message.id %q is not an upper-case UUID as the agent prints them", inner["id"])
	}
	// Milliseconds since the epoch: after 2000 and before 2200 only in ms.
	if ts := inner["timestamp"].(float64); ts < 946684800000 || ts > 7258118400000 {
		t.Fatalf("message.timestamp %v is not in milliseconds", ts)
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case bool:
		return "bool"
	case string:
		return "string"
	case float64:
		return "number"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case nil:
		return "null"
	}
	return "?"
}

func texts(ms []v1MessageJSON) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Message.Text)
	}
	return out
}

// v2Messages lists member's messages through v2, seen included, oldest first.
func (f *v1Fixture) v2Messages(memberID string) []messageJSON {
	f.t.Helper()
	var out messagesJSON
	f.request("GET", "/v1/messages?seen=true&sort-dir=asc&user="+memberID, nil).expect(http.StatusOK).decode(&out)
	return *out.Messages
}

// README "Getting Notifications": GET /messages?user=ipctest&limit=1&offset=0.
func TestV1Messages(t *testing.T) {
	t.Parallel()
	f := newV1Fixture(t)
	v2 := f.v2Messages(f.ipctest.ID)

	page := f.list("/messages?user=ipctest&limit=1&offset=0")
	if page.Total != "4" || len(page.Messages) != 1 {
		t.Fatalf("limit=1: total %q, %d messages; want \"4\" and 1", page.Total, len(page.Messages))
	}
	newest := page.Messages[0]
	if newest.Deleted || newest.Seen || newest.Type != "data" || newest.User != "ipctest" ||
		newest.Message.Text != "second upload" || newest.Message.ID != strings.ToUpper(v2[3].ID) ||
		newest.Message.Timestamp != v2[3].At.UnixMilli() || len(newest.Payload) != 0 {
		t.Fatalf("newest message: %+v (v2: %+v)", newest, v2[3])
	}

	asc := f.list("/messages?user=ipctest&sortField=timestamp&sortDir=asc")
	if asc.Total != "4" || !slices.Equal(texts(asc.Messages)[1:], []string{"a.txt uploaded", "cat_06221137 completed", "second upload"}) {
		t.Fatalf("ascending: %q %q", asc.Total, texts(asc.Messages))
	}
	sensor, analysis := asc.Messages[0], asc.Messages[2]
	if sensor.Type != "state changed" || !strings.Contains(sensor.Message.Text, "unlocked") ||
		sensor.Message.Timestamp != v1Old.UnixMilli() || sensor.Payload["sensor_id"] != "door1" ||
		sensor.Payload["address"] != "1 Main Street" {
		t.Fatalf("sensor event as v1: %+v", sensor)
	}
	if analysis.Payload["action"] != "job_status_change" || analysis.Subject != "cat_06221137 completed" {
		t.Fatalf("free-form object message as v1: %+v", analysis)
	}

	check := func(query, total string, want ...string) {
		t.Helper()
		got := f.list("/messages?user=ipctest" + query)
		if got.Total != total || !slices.Equal(texts(got.Messages), want) {
			t.Errorf("GET /messages%s: total %q %q, want %q %q", query, got.Total, texts(got.Messages), total, want)
		}
	}
	check("&filter=data", "2", "second upload", "a.txt uploaded")
	check("&filter=DATA&sortdir=ASC", "2", "a.txt uploaded", "second upload") // names and values in any case
	check("&limit=2&offset=1&sortDir=asc", "4", "a.txt uploaded", "cat_06221137 completed")
	check("&sortField=uuid&sortDir=desc&limit=2", "4", "second upload", "cat_06221137 completed")
	check("&sortField=subject&sortDir=asc&filter=data", "2", "second upload", "a.txt uploaded")

	// seen: true only seen, false only unseen, absent both; filter=new is unseen.
	f.v1("POST", "/seen?user=ipctest", map[string]any{"uuids": []string{asc.Messages[1].Message.ID}}).expect(http.StatusOK)
	check("&seen=true", "1", "a.txt uploaded")
	check("&seen=false&filter=data", "1", "second upload")
	check("&seen=true&filter=new&sortDir=asc", "3", sensor.Message.Text, "cat_06221137 completed", "second upload")
	check("", "4", "second upload", "cat_06221137 completed", "a.txt uploaded", sensor.Message.Text)

	// user is a username or a member id; an unknown one has no messages.
	byID := f.list("/messages?user=" + f.other.ID)
	if byID.Total != "1" || byID.Messages[0].User != f.other.ID {
		t.Fatalf("by member id: %+v", byID)
	}
	if nobody := f.list("/messages?user=nobody"); nobody.Total != "0" || len(nobody.Messages) != 0 {
		t.Fatalf("unknown user: %+v", nobody)
	}

	for query, name := range map[string]string{"": "user", "?user=ipctest&sortField=colour": "sortField",
		"?user=ipctest&sortDir=up": "sortDir", "?user=ipctest&limit=ten": "limit", "?user=ipctest&offset=x": "offset"} {
		f.v1("GET", "/messages"+query, nil).expectProblem(http.StatusBadRequest, "invalid-parameter", name)
	}
	f.request("GET", "/messages?user=ipctest", nil).expect(http.StatusOK) // the admin token opens v1 too
	f.request("GET", "/messages?user=ipctest", nil, "Authorization", "Bearer nope").
		expectProblem(http.StatusUnauthorized, "unauthorized")
	// The v1 token opens nothing else.
	f.v1("GET", "/v1/clients", nil).expectProblem(http.StatusUnauthorized, "unauthorized")
}

// README: GET /unseen-messages?user=ipctest → {"messages":[],"total":"0"} once
// everything is seen; before, every unseen message, oldest first.
func TestV1UnseenMessages(t *testing.T) {
	t.Parallel()
	f := newV1Fixture(t)
	unseen := f.list("/unseen-messages?user=ipctest")
	if unseen.Total != "4" || len(unseen.Messages) != 4 || unseen.Messages[3].Message.Text != "second upload" ||
		unseen.Messages[0].Type != "state changed" {
		t.Fatalf("unseen, oldest first: %q %q", unseen.Total, texts(unseen.Messages))
	}
	f.v1("POST", "/mark-all-seen", map[string]any{"user": "ipctest"}).expect(http.StatusOK)
	resp := f.v1("GET", "/unseen-messages?user=ipctest", nil).expect(http.StatusOK)
	if got := strings.TrimSpace(string(resp.body)); got != `{"messages":[],"total":"0"}` {
		t.Fatalf("all seen: %s, want the README's {\"messages\":[],\"total\":\"0\"}", got)
	}
	if other := f.list("/unseen-messages?user=" + f.other.ID); other.Total != "1" {
		t.Fatalf("another member's unseen messages after ipctest's mark-all-seen: %+v", other)
	}
	f.v1("GET", "/unseen-messages", nil).expectProblem(http.StatusBadRequest, "invalid-parameter", "user")
}

// README "Getting the Ten Most Recent": the ten newest, ascending, body as
// /messages'; total counts every message, seen or not.
func TestV1LastTenMessages(t *testing.T) {
	t.Parallel()
	f := newV1Fixture(t)
	for i := range 8 {
		f.notify("tool", "tool "+strconv.Itoa(i), nil)
	}
	f.v1("POST", "/mark-all-seen", map[string]any{"user": "ipctest", "type": "tool"}).expect(http.StatusOK)
	got := f.list("/last-ten-messages?user=ipctest")
	want := []string{"cat_06221137 completed", "second upload"}
	for i := range 8 {
		want = append(want, "tool "+strconv.Itoa(i))
	}
	if got.Total != "12" || !slices.Equal(texts(got.Messages), want) {
		t.Fatalf("last ten: total %q %q, want \"12\" %q", got.Total, texts(got.Messages), want)
	}
	for i := 1; i < len(got.Messages); i++ {
		if got.Messages[i].Message.Timestamp < got.Messages[i-1].Message.Timestamp {
			t.Fatalf("not ascending by timestamp: %+v", got.Messages)
		}
	}
	if !got.Messages[9].Seen || got.Messages[0].Seen {
		t.Fatalf("seen flags: %+v", got.Messages)
	}
}

// README "Counting Notifications": its three examples.
func TestV1CountMessages(t *testing.T) {
	t.Parallel()
	f := newV1Fixture(t)
	count := func(query string) int {
		t.Helper()
		fields := f.v1("GET", "/count-messages?user=ipctest"+query, nil).expect(http.StatusOK).fields()
		if len(fields) != 4 {
			t.Fatalf("count-messages%s: %v, want the README's four fields", query, fields)
		}
		for _, k := range []string{"user-total", "system-total", "system-total-new", "system-total-unseen"} {
			if jsonKind(fields[k]) != "number" {
				t.Fatalf("count-messages%s: %q = %#v, want a number", query, k, fields[k])
			}
			if k != "user-total" && fields[k] != 0.0 {
				t.Fatalf("count-messages%s: %q = %v, want 0 (no system messages)", query, k, fields[k])
			}
		}
		return int(fields["user-total"].(float64))
	}
	if n := count(""); n != 4 {
		t.Fatalf("all messages: %d, want 4", n)
	}
	if n := count("&filter=data"); n != 2 {
		t.Fatalf("data messages: %d, want 2", n)
	}
	newest := f.list("/messages?user=ipctest&limit=1").Messages[0].Message.ID
	f.v1("POST", "/seen?user=ipctest", map[string]any{"uuids": []string{newest}}).expect(http.StatusOK)
	if n := count("&filter=data&seen=false"); n != 1 {
		t.Fatalf("unseen data messages: %d, want 1", n)
	}
	if n := count("&seen=true"); n != 1 {
		t.Fatalf("seen messages: %d, want 1", n)
	}
	if n := f.v1("GET", "/count-messages?user=nobody", nil).expect(http.StatusOK).fields()["user-total"]; n != 0.0 {
		t.Fatalf("unknown user: %v", n)
	}
}

// README "Marking Notifications as Seen": {"success":true,"count":<unseen
// left>}; unknown and already seen ids are silently ignored.
func TestV1Seen(t *testing.T) {
	t.Parallel()
	f := newV1Fixture(t)
	ids := f.list("/messages?user=ipctest&sortDir=asc")
	first := ids.Messages[0].Message.ID
	seen := func(user string, uuids []string, want int) {
		t.Helper()
		resp := f.v1("POST", "/seen?user="+user, map[string]any{"uuids": uuids}).expect(http.StatusOK)
		if got := strings.TrimSpace(string(resp.body)); got != `{"success":true,"count":`+strconv.Itoa(want)+`}` {
			t.Fatalf("POST /seen?user=%s %v: %s, want count %d", user, uuids, got, want)
		}
	}
	seen("ipctest", []string{first}, 3)
	seen("ipctest", []string{first, "6DF4475F-EE81-4063-B457-6EDFA4ED9C5F", "not-a-uuid"}, 3) // no-ops
	seen("ipctest", []string{strings.ToLower(ids.Messages[1].Message.ID)}, 2)                 // either case
	// Another member's message is not ipctest's to mark.
	otherID := f.list("/messages?user=" + f.other.ID).Messages[0].Message.ID
	seen("ipctest", []string{otherID}, 2)
	if f.list("/unseen-messages?user="+f.other.ID).Total != "1" {
		t.Fatal("ipctest marked another member's message seen")
	}
	seen("nobody", []string{first}, 0)
	f.v1("POST", "/seen?user=ipctest", map[string]any{}).expectInvalid("uuids")
	f.v1("POST", "/seen", map[string]any{"uuids": []string{first}}).expectProblem(http.StatusBadRequest, "invalid-parameter", "user")
}

// README "Marking All Notifications as Seen": {"user"} → {"success":true,"count":0};
// a non-existent user does not fail.
func TestV1MarkAllSeen(t *testing.T) {
	t.Parallel()
	f := newV1Fixture(t)
	mark := func(body map[string]any, want int) {
		t.Helper()
		resp := f.v1("POST", "/mark-all-seen", body).expect(http.StatusOK)
		if got := strings.TrimSpace(string(resp.body)); got != `{"success":true,"count":`+strconv.Itoa(want)+`}` {
			t.Fatalf("POST /mark-all-seen %v: %s, want count %d", body, got, want)
		}
	}
	mark(map[string]any{"user": "ipctest", "type": "data"}, 2) // a field of the notification narrows it
	mark(map[string]any{"user": "ipctest", "subject": "ignored"}, 0)
	mark(map[string]any{"user": "ipctest"}, 0)
	mark(map[string]any{"user": "some_user_name"}, 0)
	if f.list("/unseen-messages?user="+f.other.ID).Total != "1" {
		t.Fatal("mark-all-seen reached another member")
	}
	f.v1("POST", "/mark-all-seen", map[string]any{}).expectInvalid("user")
}

// README "Deleting Notifications": {"uuids"} → {"success":true}; deleting a
// deleted or non-existent message is a no-op.
func TestV1Delete(t *testing.T) {
	t.Parallel()
	f := newV1Fixture(t)
	newest := f.list("/messages?user=ipctest&limit=1").Messages[0].Message.ID
	for range 2 {
		resp := f.v1("POST", "/delete?user=ipctest", map[string]any{"uuids": []string{newest, "361C2A67-3942-4F7A-9734-E5B8B28FDC12"}}).
			expect(http.StatusOK)
		if got := strings.TrimSpace(string(resp.body)); got != `{"success":true}` {
			t.Fatalf("POST /delete: %s", got)
		}
	}
	left := f.list("/messages?user=ipctest")
	if left.Total != "3" || slices.Contains(texts(left.Messages), "second upload") {
		t.Fatalf("after delete: %q %q", left.Total, texts(left.Messages))
	}
	if n := f.list("/unseen-messages?user=ipctest").Total; n != "3" {
		t.Fatalf("unseen after delete: %s", n)
	}
	f.v1("POST", "/delete?user=ipctest", map[string]any{"uuid": newest}).expectInvalid("uuids")
}

// README "Deleting All Notifications": DELETE /delete-all?user= →
// {"success":true,"count":"0"}; other parameters (filter) narrow it.
func TestV1DeleteAll(t *testing.T) {
	t.Parallel()
	f := newV1Fixture(t)
	deleteAll := func(query, want string) {
		t.Helper()
		resp := f.v1("DELETE", "/delete-all?user=ipctest"+query, nil).expect(http.StatusOK)
		if got := strings.TrimSpace(string(resp.body)); got != `{"success":true,"count":"`+want+`"}` {
			t.Fatalf("DELETE /delete-all%s: %s, want count %q", query, got, want)
		}
	}
	deleteAll("&filter=data", "2")
	if got := f.list("/messages?user=ipctest&sortDir=asc"); got.Total != "2" || got.Messages[1].Type != "analysis" {
		t.Fatalf("after deleting data: %+v", got)
	}
	deleteAll("", "0")
	deleteAll("", "0")
	if got := f.list("/messages?user=ipctest"); got.Total != "0" {
		t.Fatalf("after delete-all: %+v", got)
	}
	if got := f.list("/messages?user=" + f.other.ID); got.Total != "1" {
		t.Fatalf("delete-all reached another member: %+v", got)
	}
	resp := f.v1("DELETE", "/delete-all?user=nobody", nil).expect(http.StatusOK)
	var body map[string]any
	if err := json.Unmarshal(resp.body, &body); err != nil || body["count"] != "0" || body["success"] != true {
		t.Fatalf("unknown user: %s", resp.body)
	}
}

// A member's username: optional, unique across clients, never shaped like a
// member id; PATCH changes or removes it.
func TestMemberUsername(t *testing.T) {
	t.Parallel()
	a := newInboxAPI(t, webapi.InboxConfig{})
	c1, c2 := a.createClient("one"), a.createClient("two")
	alice := a.createMember(c1.ID, map[string]any{"name": "Alice", "username": "alice"})
	got := a.request("GET", "/v1/members/"+alice.ID, nil).expect(http.StatusOK).fields()
	if got["username"] != "alice" {
		t.Fatalf("GET member: username %v", got["username"])
	}
	bob := a.createMember(c1.ID, map[string]any{"name": "Bob"})
	if f := a.request("GET", "/v1/members/"+bob.ID, nil).expect(http.StatusOK).fields(); f["username"] != nil {
		t.Fatalf("a member without a username shows %v", f["username"])
	}
	a.request("POST", "/v1/clients/"+c2.ID+"/members", map[string]any{"name": "Alice 2", "username": "alice"}).
		expectProblem(http.StatusConflict, "conflict", "alice")
	a.request("POST", "/v1/clients/"+c2.ID+"/members", map[string]any{"name": "x", "username": uuid.NewString()}).
		expectInvalid("username")
	a.request("POST", "/v1/clients/"+c2.ID+"/members", map[string]any{"name": "x", "username": "a b"}).
		expectInvalid("username")
	a.request("PATCH", "/v1/members/"+bob.ID, map[string]any{"username": "alice"}).
		expectProblem(http.StatusConflict, "conflict")
	a.request("PATCH", "/v1/members/"+bob.ID, map[string]any{"username": "bob.smith@example"}).expect(http.StatusOK)
	a.request("PATCH", "/v1/members/"+alice.ID, map[string]any{"username": nil}).expect(http.StatusOK)
	if f := a.request("GET", "/v1/members/"+alice.ID, nil).expect(http.StatusOK).fields(); f["username"] != nil {
		t.Fatalf("removed username shows %v", f["username"])
	}
	a.createMember(c2.ID, map[string]any{"name": "Alice 2", "username": "alice"}) // free again
	m, err := a.stores.Registry.MemberByUser(t.Context(), "bob.smith@example")
	if err != nil || m.ID != bob.ID {
		t.Fatalf("MemberByUser(username) = %+v, %v", m, err)
	}
	if m, err := a.stores.Registry.MemberByUser(t.Context(), bob.ID); err != nil || m.Username != "bob.smith@example" {
		t.Fatalf("MemberByUser(id) = %+v, %v", m, err)
	}
	if _, err := a.stores.Registry.MemberByUser(t.Context(), "nobody"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("MemberByUser(unknown): %v, want ErrNotFound", err)
	}
}

// TestV1PostNotification: POST /notification takes the notification agent's
// body (the README's example, "Endpoint: POST /notification"): user names the
// member, the answer is {"success":true}, and GET /messages shows it — the
// payload as its payload, or the message as its text; the subject is the text
// when there is neither. An unknown user, or user beside member_id, is a 422
// naming user.
func TestV1PostNotification(t *testing.T) {
	t.Parallel()
	f := newV1Fixture(t)
	var ok struct {
		Success *bool `json:"success"`
	}
	f.request("POST", "/notification", `{"type": "nada", "user": "ipctest", "subject": "nothing happened",
		"message": "nada y pues nada y pues nada", "email": true, "email_template": "nothing_happened",
		"payload": {"email_address": "nobody@iplantcollaborative.org"}}`).expect(http.StatusOK).decode(&ok)
	if ok.Success == nil || !*ok.Success {
		t.Fatalf("answer %+v, want {\"success\":true}", ok)
	}
	f.request("POST", "/notification", `{"type": "data", "user": "ipctest", "subject": "upload 2 done",
		"message": "file.txt was uploaded"}`).expect(http.StatusOK)
	f.request("POST", "/notification", `{"type": "data", "user": "`+f.ipctest.ID+`", "subject": "only a subject"}`).expect(http.StatusOK)

	got := f.list("/messages?user=ipctest&sortDir=desc&limit=3").Messages
	if len(got) != 3 {
		t.Fatalf("GET /messages: %d messages, want the 3 posted: %+v", len(got), got)
	}
	bySubject := map[string]v1MessageJSON{}
	for _, m := range got {
		bySubject[m.Subject] = m
	}
	if m := bySubject["nothing happened"]; m.Type != "nada" || m.Payload["email_address"] != "nobody@iplantcollaborative.org" {
		t.Errorf("the README's example: %+v, want type nada and its payload", m)
	}
	if m := bySubject["upload 2 done"]; m.Message.Text != "file.txt was uploaded" {
		t.Errorf("a message with text: %+v, want the text", m)
	}
	if m := bySubject["only a subject"]; m.Message.Text != "only a subject" {
		t.Errorf("a message with only a subject: %+v, want the subject as text", m)
	}

	f.request("POST", "/notification", `{"type": "data", "user": "nobody", "subject": "s"}`).
		expectProblem(http.StatusUnprocessableEntity, "validation", "user")
	f.request("POST", "/notification", `{"type": "data", "user": "ipctest", "member_id": "`+f.ipctest.ID+`", "subject": "s"}`).
		expectProblem(http.StatusUnprocessableEntity, "validation", "user")
}
