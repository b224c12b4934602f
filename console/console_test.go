package console_test

import (
	"bufio"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/console"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/incident"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

const adminToken = "console-test-admin-token"

// connections is the heartbeat's view read straight from Redis, as the tracker
// does without its timeouts (the tests use the fleet's).
type connections struct{ r *heartbeat.RedisStore }

func (c connections) Status(ctx context.Context, id string) (time.Time, string, error) {
	statuses, err := c.r.HeartbeatStatuses(ctx, []string{id})
	st := statuses[id]
	switch {
	case err != nil:
		return time.Time{}, "", err
	case !st.Deadline.IsZero():
		return st.Deadline, console.ConnectionOnline, nil
	case !st.Missed.IsZero():
		return st.Missed, console.ConnectionLost, nil
	}
	return time.Time{}, console.ConnectionUnknown, nil
}

func (c connections) LostSensors(ctx context.Context, page storage.Page) ([]console.LostSensor, error) {
	lost, err := c.r.LostHeartbeats(ctx, page)
	out := make([]console.LostSensor, len(lost))
	for i, l := range lost {
		out[i] = console.LostSensor{SensorID: l.SensorID, LostAt: l.Deadline, LastSeen: l.Deadline.Add(-time.Hour)}
	}
	return out, err
}

// tail follows the events topic of a kfake cluster.
type tail struct{ cfg stream.Config }

func (t tail) TailEvents(ctx context.Context, since time.Time, fn func(event.Event)) error {
	return stream.TailEvents(ctx, t.cfg, since, slog.New(slog.DiscardHandler), fn)
}

// fixture is a console over real stores, served by httptest.
type fixture struct {
	stores *storagetest.Stores
	srv    *httptest.Server
	con    *console.Console
	cancel context.CancelFunc
	stream stream.Config
}

func newFixture(t *testing.T, token string, stores *storagetest.Stores, live bool) *fixture {
	t.Helper()
	if stores == nil {
		stores = storagetest.New(t)
	}
	f := &fixture{stores: stores}
	deps := console.Deps{Registry: stores.Registry, Members: stores.Registry, Inbox: inbox.NewPostgresStore(stores.Postgres),
		Deliveries: stores.Postgres, Sessions: console.NewRedisStore(stores.Redis),
		Heartbeat: heartbeat.NewRedisStore(stores.Redis), Connections: connections{heartbeat.NewRedisStore(stores.Redis)},
		History:   analytics.New(stores.ClickHouse.Conn(), analytics.NewPostgresScopes(stores.Postgres.Pool())),
		Incidents: incident.NewAPIStore(incident.NewPostgresStore(stores.Postgres))}
	if live {
		f.stream = streamtest.Config(t, 2)
		deps.Events = tail{f.stream}
	}
	var err error
	f.con, err = console.New(console.Config{AdminToken: token, LiveLinger: time.Millisecond}, deps, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	done := make(chan error, 1)
	go func() { done <- f.con.Run(ctx) }()
	f.srv = httptest.NewServer(f.con.Handler())
	t.Cleanup(func() {
		cancel()
		<-done
		f.srv.Close()
	})
	return f
}

// browser is an HTTP client with a cookie jar that does not follow redirects.
func (f *fixture) browser(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// signIn signs c in and returns the session's CSRF token.
func (f *fixture) signIn(t *testing.T, c *http.Client) string {
	t.Helper()
	resp, _ := post(t, c, f.srv.URL+"/console/login", url.Values{"token": {adminToken}, "next": {"/console/"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("sign-in = %d to %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	_, body := get(t, c, f.srv.URL+"/console/")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token on the fleet page:\n%s", body)
	}
	return m[1]
}

func TestSignInAndOut(t *testing.T) {
	t.Parallel()
	f := newFixture(t, adminToken, nil, false)
	c := f.browser(t)

	resp, _ := get(t, c, f.srv.URL+"/console/sensors/x1")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login?next=%2Fconsole%2Fsensors%2Fx1" {
		t.Fatalf("signed out, a page = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := post(t, c, f.srv.URL+"/console/login", url.Values{"token": {"wrong"}}, nil)
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 || !strings.Contains(body, "not valid") {
		t.Fatalf("a wrong token = %d with cookies %v", resp.StatusCode, resp.Cookies())
	}

	resp, _ = post(t, c, f.srv.URL+"/console/login", url.Values{"token": {adminToken}, "next": {"https://evil.example/"}}, nil)
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" || len(cookies) != 1 {
		t.Fatalf("sign-in = %d to %q with %v (a foreign next must not be followed)", resp.StatusCode, resp.Header.Get("Location"), cookies)
	}
	if ck := cookies[0]; !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/console" || len(ck.Value) < 40 {
		t.Fatalf("session cookie = %+v", ck)
	}
	resp, body = get(t, c, f.srv.URL+"/console/")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="count-online"`) {
		t.Fatalf("fleet page = %d", resp.StatusCode)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)[1]

	// Sign-out needs the form's token; with it, the session is gone for good.
	if resp, _ := post(t, c, f.srv.URL+"/console/logout", nil, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-out without the CSRF token = %d, want 403", resp.StatusCode)
	}
	resp, _ = post(t, c, f.srv.URL+"/console/logout", url.Values{"csrf": {csrf}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login?signed_out=1" {
		t.Fatalf("sign-out = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	req, _ := http.NewRequest("GET", f.srv.URL+"/console/", nil)
	req.AddCookie(cookies[0]) // the old cookie, as a thief would replay it
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the signed-out cookie = %d, want a redirect to sign-in", resp.StatusCode)
	}
}

func TestFormsFromAnotherSiteAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, adminToken, nil, false)
	c := f.browser(t)
	for _, h := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}} {
		resp, _ := post(t, c, f.srv.URL+"/console/login", url.Values{"token": {adminToken}}, h)
		if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
			t.Fatalf("sign-in with %v = %d, want 403", h, resp.StatusCode)
		}
	}
	csrf := f.signIn(t, c)
	id := "01a20a61-8608-7732-b6ee-92df4cb0788b"
	for name, form := range map[string]url.Values{
		"no token":    {"client": {id}},
		"wrong token": {"client": {id}, "csrf": {csrf + "x"}},
	} {
		resp, _ := post(t, c, f.srv.URL+"/console/deliveries/"+id+"/redeliver", form, nil)
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("redeliver with %s = %d, want 403", name, resp.StatusCode)
		}
	}
	resp, _ := post(t, c, f.srv.URL+"/console/deliveries/"+id+"/redeliver", url.Values{"client": {id}, "csrf": {csrf}},
		map[string]string{"Sec-Fetch-Site": "same-site"})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("redeliver from a sibling site = %d, want 403", resp.StatusCode)
	}
}

// A session ends when the admin token it signed in with is rotated, in every
// process that shares the Redis.
func TestSessionEndsWhenTheAdminTokenChanges(t *testing.T) {
	t.Parallel()
	old := newFixture(t, adminToken, nil, false)
	c := old.browser(t)
	old.signIn(t, c)
	rotated := newFixture(t, adminToken+"-rotated", old.stores, false)
	u, _ := url.Parse(old.srv.URL)
	req, _ := http.NewRequest("GET", rotated.srv.URL+"/console/", nil)
	for _, ck := range c.Jar.Cookies(u) {
		req.AddCookie(ck)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a session of the old token = %d on a console with the new one, want a redirect to sign-in", resp.StatusCode)
	}
}

// Every response carries the Content-Security-Policy; nothing the console serves
// loads from elsewhere, and no template has inline script, style or handlers.
func TestSecurityHeadersAndSelfContainedAssets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, adminToken, nil, false)
	c := f.browser(t)
	f.signIn(t, c)
	for _, path := range []string{"/console/", "/console/login", "/console/clients", "/console/live", "/console/nope",
		"/console/sensors/unknown1", "/console/static/console.css"} {
		resp, _ := get(t, c, f.srv.URL+path)
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") ||
			strings.Contains(csp, "unsafe") || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: CSP %q", path, csp)
		}
	}
	if resp, _ := get(t, c, f.srv.URL+"/console/sensors/unknown1"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown sensor = %d, want 404", resp.StatusCode)
	}

	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	inline := regexp.MustCompile(`(?i)<script(\s[^>]*)?>\s*[^<\s]|\sstyle=|\son[a-z]+=|javascript:`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasPrefix(path, "templates") || strings.HasPrefix(path, "static")) {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := string(b)
		if path == filepath.Join("static", "favicon.svg") {
			text = strings.ReplaceAll(text, "http://www.w3.org/2000/svg", "") // a namespace, not a fetch
		}
		if m := external.FindString(text); m != "" {
			t.Errorf("%s refers to another origin: %q", path, m)
		}
		if strings.HasSuffix(path, ".html") {
			if m := inline.FindString(text); m != "" {
				t.Errorf("%s has inline script, style or a handler: %q", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFleetCountsLostAndSearch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, adminToken, nil, false)
	ctx := context.Background()
	for _, id := range []string{"door1", "door2", "door10", "gate"} {
		if _, err := f.stores.Registry.CreateSensor(ctx, registry.Sensor{ID: id, Address: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := heartbeat.NewRedisStore(f.stores.Redis).LoadHeartbeatDeadlines(ctx, []heartbeat.Deadline{{SensorID: "door1", Deadline: now.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := heartbeat.NewRedisStore(f.stores.Redis).LoadHeartbeatLosses(ctx, []heartbeat.Deadline{{SensorID: "door2", Deadline: now.Add(-time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	c := f.browser(t)
	f.signIn(t, c)
	_, body := get(t, c, f.srv.URL+"/console/")
	for _, want := range []string{`id="count-online">1<`, `id="count-lost">1<`, `id="count-unknown">2<`, `id="count-registered">4<`,
		`href="/console/sensors/door2"`} {
		if !strings.Contains(body, want) {
			t.Errorf("fleet page lacks %s", want)
		}
	}
	resp, _ := get(t, c, f.srv.URL+"/console/?q=gate")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/sensors/gate" {
		t.Fatalf("an exact id = %d to %q, want the sensor", resp.StatusCode, resp.Header.Get("Location"))
	}
	_, body = get(t, c, f.srv.URL+"/console/?q=door")
	_, results, _ := strings.Cut(body, `id="search-results"`)
	results, _, _ = strings.Cut(results, "</table>")
	if got := regexp.MustCompile(`sensors/(door\d+)"`).FindAllStringSubmatch(results, -1); len(got) != 3 ||
		got[0][1] != "door1" || got[1][1] != "door10" || got[2][1] != "door2" {
		t.Fatalf("a prefix lists %v, want door1, door10, door2", got)
	}
	_, body = get(t, c, f.srv.URL+"/console/?q="+url.QueryEscape("<script>"))
	if !strings.Contains(body, "1 to 16 letters or digits") || strings.Contains(body, "<script>") {
		t.Fatal("a bad query is neither refused nor escaped")
	}
}

func TestRedeliverAFailedDelivery(t *testing.T) {
	t.Parallel()
	f := newFixture(t, adminToken, nil, false)
	ctx := context.Background()
	pg := f.stores.Postgres
	if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: "door1", Address: "a"}); err != nil {
		t.Fatal(err)
	}
	client, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "Acme", WebhookURL: "https://example.com/h", Secret: "whsec_c2VjcmV0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := registry.New(pg).LinkSensor(ctx, client.ID, "door1"); err != nil {
		t.Fatal(err)
	}
	one := 1
	if _, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, []storage.NotificationInput{{EventID: "e1", Type: "state_changed", SensorID: "door1", Data: &one, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	claimed, err := pg.ClaimDeliveries(ctx, time.Now().Add(time.Minute), 10, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claimed %v, %v", claimed, err)
	}
	d := claimed[0]
	if err := storagetest.FailDelivery(ctx, pg, d.ID, d.Attempts, "400 Bad Request", 400); err != nil {
		t.Fatal(err)
	}

	c := f.browser(t)
	csrf := f.signIn(t, c)
	_, body := get(t, c, f.srv.URL+"/console/clients/"+client.ID)
	for _, want := range []string{`data-state="FAILED">1<`, `data-delivery="` + d.ID + `"`, "HTTP 400"} {
		if !strings.Contains(body, want) {
			t.Fatalf("client page lacks %s:\n%s", want, body)
		}
	}
	redeliver := func() *http.Response {
		resp, _ := post(t, c, f.srv.URL+"/console/deliveries/"+d.ID+"/redeliver", url.Values{"csrf": {csrf}, "client": {client.ID}}, nil)
		return resp
	}
	if resp := redeliver(); resp.StatusCode != http.StatusSeeOther || !strings.HasSuffix(resp.Header.Get("Location"), "?redelivered="+d.ID) {
		t.Fatalf("redeliver = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if got, err := pg.GetDelivery(ctx, d.ID); err != nil || got.State != storage.DeliveryPending {
		t.Fatalf("after redeliver the delivery is %s, %v; want PENDING", got.State, err)
	}
	if resp := redeliver(); !strings.HasSuffix(resp.Header.Get("Location"), "?not_failed="+d.ID) {
		t.Fatalf("redelivering a pending delivery = %q, want not_failed", resp.Header.Get("Location"))
	}
}

// The live stream says it is ready, carries an event published after it opened,
// and ends when the console stops, so the server's shutdown does not wait for it.
func TestLiveStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t, adminToken, nil, true)
	c := f.browser(t)
	f.signIn(t, c)
	resp, err := c.Get(f.srv.URL + "/console/live/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("live events = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(resp.Body)
	next := func(prefix string) string {
		t.Helper()
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), prefix) {
				return lines.Text()
			}
		}
		t.Fatalf("the stream ended before a line %q: %v", prefix, lines.Err())
		return ""
	}
	next("event: ready")
	one := 1
	pub := stream.NewEventPublisher(f.stream, streamtest.Client(t, f.stream))
	if err := pub.Publish(context.Background(), []event.Event{{ID: "live1", Type: event.StateChanged, SensorID: "door9", Data: &one, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	next("event: event")
	if data := next("data: "); !strings.Contains(data, `"sensor_id":"door9"`) || !strings.Contains(data, `"state":"locked"`) {
		t.Fatalf("event data = %s", data)
	}
	f.cancel()
	ended := make(chan struct{})
	go func() {
		for lines.Scan() {
		}
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the live stream stayed open after the console stopped")
	}
}
