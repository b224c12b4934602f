package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// consoleScreenshot is the README's picture, which the browser test rewrites
// only when LOCKSTREAM_UPDATE_SCREENSHOT=1, so an ordinary run leaves the tree
// clean.
var consoleScreenshot = filepath.Join("..", "..", "docs", "console.png")

// saveScreenshot writes the browser's screenshot to docs/console.png when
// LOCKSTREAM_UPDATE_SCREENSHOT=1, else under the test's temporary directory,
// and checks either way that it is a whole PNG about the window's width, at
// least about its height, with something drawn on it (not a blank page).
func saveScreenshot(t *testing.T, raw []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "console.png")
	if os.Getenv("LOCKSTREAM_UPDATE_SCREENSHOT") == "1" {
		path = consoleScreenshot
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatalf("writing the screenshot: %v", err)
	}
	written, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(written))
	if err != nil {
		t.Fatalf("the screenshot %s is not a PNG: %v", path, err)
	}
	size := img.Bounds().Size()
	colours := map[color.RGBA]bool{}
	for y := 0; y < size.Y; y += 7 {
		for x := 0; x < size.X; x += 7 {
			colours[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)] = true
		}
	}
	// The page is as wide as the window less its scroll bar, at least as high.
	if size.X < browserWidth*9/10 || size.X > browserWidth || size.Y < browserHeight*9/10 ||
		len(written) < 20<<10 || len(written) > 10<<20 || len(colours) < 16 {
		t.Fatalf("the screenshot %s is %v, %d bytes, %d colours: want about the %dx%d window, 20 KiB to 10 MiB, a drawn page",
			path, size, len(written), len(colours), browserWidth, browserHeight)
	}
	t.Logf("screenshot %s: %v, %d KiB", path, size, len(written)>>10)
}

// TestConsoleInBrowser drives the operator console of `lockstream all` with
// headless Chromium: a wrong token is refused; sign-in shows the fleet counts; the
// lost sensor opens with its state and its chart of changes per hour; a failed
// delivery is redelivered; a new event appears in the live view; sign-out ends the
// session (the old cookie no longer works); a member signs in with its own token,
// marks a message of its inbox seen and signs out.
func TestConsoleInBrowser(t *testing.T) {
	browser := startBrowser(t)
	env := startConsoleNode(t)

	clientID, seeded := env.seedFleet(t)

	base := env.base
	nav := func(path string) {
		t.Helper()
		if err := chromedp.Do(browser, chromedp.Navigate(base+path)); err != nil {
			t.Fatalf("opening %s: %v", path, err)
		}
	}

	// Not signed in: the console sends the browser to sign-in; a wrong token is
	// refused with 401.
	nav("/console/")
	if loc := value(t, browser, chromedp.Location()); !strings.HasPrefix(loc, base+"/console/login") {
		t.Fatalf("not signed in, /console/ went to %s", loc)
	}
	do(t, browser, chromedp.SendKeys(chromedp.ID("token"), "not-the-token"))
	if resp := submit(t, browser, chromedp.ID("sign-in")); resp.Status != http.StatusUnauthorized {
		t.Fatalf("a wrong token answered %d, want 401", resp.Status)
	}
	if got := value(t, browser, chromedp.Text(chromedp.ID("login-error"))); !strings.Contains(got, "not valid") {
		t.Fatalf("wrong token message = %q", got)
	}

	// Sign in: the fleet counts.
	do(t, browser, chromedp.SendKeys(chromedp.ID("token"), env.adminToken))
	if resp := submit(t, browser, chromedp.ID("sign-in")); resp.Status != http.StatusOK || !strings.HasSuffix(resp.URL, "/console/") {
		t.Fatalf("sign-in ended at %s with %d", resp.URL, resp.Status)
	}
	for id, want := range map[string]string{"count-online": "3", "count-lost": "1", "count-unknown": "0", "count-registered": "4"} {
		if got := value(t, browser, chromedp.Text(chromedp.ID(id))); got != want {
			t.Errorf("#%s = %q, want %q", id, got, want)
		}
	}

	// The lost sensor: its connection and its chart.
	submit(t, browser, chromedp.CSS(`#lost-sensors a[href="/console/sensors/frontDoor"]`))
	if got := value(t, browser, chromedp.Text(chromedp.ID("sensor-connection"))); got != "lost" {
		t.Fatalf("frontDoor's connection shows %q, want lost", got)
	}
	total := value(t, browser, chromedp.AttributeValue(chromedp.ID("changes-chart"), "data-total"))
	bars := value(t, browser, chromedp.Nodes(chromedp.CSSAll("#changes-chart rect.bar")))
	if total.Value != fmt.Sprint(seeded+3) || len(bars) < 20 {
		t.Fatalf("chart: data-total %q with %d bars, want %d changes over many hours", total.Value, len(bars), seeded+3)
	}
	saveScreenshot(t, value(t, browser, chromedp.FullScreenshot(100)))

	env.redeliverInBrowser(t, browser, clientID)
	env.liveEventInBrowser(t, browser)

	env.signOutInBrowser(t, browser)
	env.memberInboxInBrowser(t, browser, clientID)
}

// memberInboxInBrowser gives the client a member with a message in its inbox,
// signs the member in, marks the message seen on the inbox page (which the API
// then shows seen) and signs out.
func (env *consoleNode) memberInboxInBrowser(t *testing.T, browser context.Context, clientID string) {
	t.Helper()
	member := env.call("POST", "/v1/clients/"+clientID+"/members", map[string]any{"name": "Dana"}, http.StatusCreated)
	memberID, _ := member["id"].(string)
	token, _ := member["token"].(string)
	env.call("POST", "/v1/notifications", map[string]any{"member_id": memberID, "type": "announcement",
		"subject": "The front door sensor gets a new battery"}, http.StatusAccepted)
	var messageID string
	waitUntil(t, "the notification is in the member's inbox", func() bool {
		list := env.call("GET", "/v1/messages?user="+memberID+"&message-type=announcement", nil, http.StatusOK)
		msgs, _ := list["messages"].([]any)
		if len(msgs) != 1 {
			return false
		}
		messageID, _ = msgs[0].(map[string]any)["id"].(string)
		return messageID != ""
	})

	do(t, browser, chromedp.Navigate(env.base+"/console/login"))
	do(t, browser, chromedp.SendKeys(chromedp.ID("token"), token))
	if resp := submit(t, browser, chromedp.ID("sign-in")); resp.Status != http.StatusOK || !strings.HasSuffix(resp.URL, "/console/inbox") {
		t.Fatalf("the member's sign-in ended at %s with %d, want its inbox", resp.URL, resp.Status)
	}
	row := `#inbox tr[data-message="` + messageID + `"]`
	if got := value(t, browser, chromedp.Text(chromedp.CSS(row))); !strings.Contains(got, "new battery") {
		t.Fatalf("the inbox row = %q", got)
	}
	if resp := submit(t, browser, chromedp.CSS(row+" button.mark-seen")); resp.Status != http.StatusOK {
		t.Fatalf("mark seen answered %d", resp.Status)
	}
	if got := value(t, browser, chromedp.AttributeValue(chromedp.CSS(row), "class")); !strings.Contains(got.Value, "seen") ||
		strings.Contains(got.Value, "unseen") {
		t.Fatalf("after mark seen the row's class is %q", got.Value)
	}
	if m := env.call("GET", "/v1/messages/"+messageID+"?user="+memberID, nil, http.StatusOK); m["seen"] != true {
		t.Fatalf("the API shows the message %v after mark seen", m)
	}
	if resp := submit(t, browser, chromedp.ID("sign-out")); !strings.Contains(resp.URL, "/console/login?signed_out=1") {
		t.Fatalf("the member's sign-out ended at %s", resp.URL)
	}
}

// redeliverInBrowser opens the client from the client list and redelivers its
// newest failed delivery; the retrier then makes a second attempt.
func (env *consoleNode) redeliverInBrowser(t *testing.T, browser context.Context, clientID string) {
	t.Helper()
	do(t, browser, chromedp.Navigate(env.base+"/console/clients"))
	submit(t, browser, chromedp.CSS(`#clients a[href="/console/clients/`+clientID+`"]`))
	row := value(t, browser, chromedp.AttributeValue(chromedp.CSS("#failed-deliveries tbody tr"), "data-delivery"))
	if !row.Exists {
		t.Fatal("the client page lists no failed delivery")
	}
	before := env.refused.Load()
	if resp := submit(t, browser, chromedp.CSS(`#failed-deliveries tr[data-delivery="`+row.Value+`"] button.redeliver`)); resp.Status != http.StatusOK {
		t.Fatalf("redeliver answered %d", resp.Status)
	}
	if got := value(t, browser, chromedp.Text(chromedp.ID("flash"))); !strings.Contains(got, row.Value) || !strings.Contains(got, "queued again") {
		t.Fatalf("after redeliver the page says %q", got)
	}
	waitUntil(t, "the redelivered delivery is attempted again", func() bool {
		// Redelivery restarts the attempt count; the attempt log keeps both.
		d := env.call("GET", "/v1/deliveries/"+row.Value, nil, http.StatusOK)
		log, _ := d["attempt_log"].([]any)
		return len(log) >= 2 && env.refused.Load() > before
	})
}

// liveEventInBrowser opens the live view and waits for the event of a reading
// ingested once the view is connected.
func (env *consoleNode) liveEventInBrowser(t *testing.T, browser context.Context) {
	t.Helper()
	do(t, browser, chromedp.Navigate(env.base+"/console/live"))
	do(t, browser, chromedp.WaitVisible(chromedp.CSS(`#live-status[data-state="connected"]`)))
	env.ingest(`{"sensor_id":"backDoor","data":0}`)
	do(t, browser, chromedp.WaitVisible(chromedp.CSS(`#live-events tr[data-sensor="backDoor"]`)))
	if got := value(t, browser, chromedp.Text(chromedp.CSS(`#live-events tr[data-sensor="backDoor"]`))); !strings.Contains(got, "state changed") || !strings.Contains(got, "unlocked") {
		t.Fatalf("live row = %q, want backDoor's state change to unlocked", got)
	}
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func value[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	return v
}

func do(t *testing.T, ctx context.Context, a chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, a); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// submit clicks sel and waits for the page it loads.
func submit[S chromedp.Selectable](t *testing.T, ctx context.Context, sel S) *network.Response {
	t.Helper()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(sel))
	if err != nil {
		t.Fatalf("browser: clicking %v: %v", sel, err)
	}
	return resp
}

// browserWidth and browserHeight are the browser window's size, the least a
// full-page screenshot measures.
const browserWidth, browserHeight = 1280, 900

// startBrowser starts headless Chromium (Debian's chromium package, which
// deploy/local/services.sh installs) with a fresh profile, for the whole test.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: run make services (deploy/local/services.sh installs Debian's chromium)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(path),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(browserWidth, browserHeight))
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(browser, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return browser
}

// consoleNode is `lockstream all` running in-process for the browser test.
type consoleNode struct {
	t          *testing.T
	base       string
	adminToken string
	stores     *storagetest.Stores
	refuser    *httptest.Server
	refused    atomic.Int64
}

const consoleIngestToken = "console-ingest-token"

func startConsoleNode(t *testing.T) *consoleNode {
	t.Helper()
	env := &consoleNode{t: t, adminToken: "console-admin-token", stores: storagetest.New(t)}
	env.refuser = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		env.refused.Add(1)
		http.Error(w, "not today", http.StatusBadRequest)
	}))
	t.Cleanup(env.refuser.Close)
	kafka := streamtest.Config(t, 3)
	addr := freeAddr(t)
	env.base = "http://" + addr
	for k, v := range map[string]string{
		"LOCKSTREAM_PG_URL": env.stores.PostgresURL, "LOCKSTREAM_CLICKHOUSE_URL": env.stores.ClickHouseURL,
		"LOCKSTREAM_REDIS_URL": env.stores.RedisURL, "LOCKSTREAM_REDIS_PREFIX": env.stores.RedisPrefix,
		"LOCKSTREAM_KAFKA_BROKERS": strings.Join(kafka.Brokers, ","), "LOCKSTREAM_KAFKA_TOPIC_PREFIX": kafka.TopicPrefix,
		"LOCKSTREAM_KAFKA_PARTITIONS": "3", "LOCKSTREAM_HTTP_ADDR": addr,
		"LOCKSTREAM_ADMIN_TOKEN": env.adminToken, "LOCKSTREAM_INGEST_TOKEN": consoleIngestToken,
		"LOCKSTREAM_HEARTBEAT_TIMEOUT": "3s", "LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL": "200ms",
		"LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE": "true", "LOCKSTREAM_RETRY_BACKOFF_BASE": "100ms",
		"LOCKSTREAM_SMTP_URL": "smtp://127.0.0.1:1", "LOCKSTREAM_DATA_DIR": t.TempDir(),
		"LOCKSTREAM_SHUTDOWN_DELAY": "0s",
	} {
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"all"}, io.Discard, &logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-exited:
			if code != 0 {
				t.Errorf("lockstream all exited %d after cancel; log:\n%s", code, logs.String())
			}
		case <-time.After(waitLimit):
			t.Errorf("lockstream all did not stop within %v of cancel (an open live view must not hold it)", waitLimit)
		}
	})
	waitUntil(t, "the API is ready", func() bool {
		resp, err := http.Get(env.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return env
}

// call makes an admin API request and returns its JSON object.
func (env *consoleNode) call(method, path string, body any, wantStatus int) map[string]any {
	env.t.Helper()
	var payload io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		payload = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, env.base+path, payload)
	req.Header.Set("Authorization", "Bearer "+env.adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		env.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantStatus {
		env.t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, wantStatus, raw)
	}
	out := map[string]any{}
	_ = json.Unmarshal(raw, &out)
	return out
}

// ingest posts readings with the ingest token.
func (env *consoleNode) ingest(body string) {
	env.t.Helper()
	req, _ := http.NewRequest("POST", env.base+"/v1/readings", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+consoleIngestToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		env.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		env.t.Fatalf("ingest %s: %d", body, resp.StatusCode)
	}
}

// seedChanges writes a week of earlier state changes of sensor into the history,
// busier in the day than at night, so the chart has something to show; it returns
// how many. The oldest hour the chart shows is 167 hours before the current one;
// the seed stops an hour short of it, so the hour may turn between seeding and
// rendering without the chart losing a seeded change.
func (env *consoleNode) seedChanges(t *testing.T, sensor string) int {
	t.Helper()
	now := time.Now().UTC()
	var events []storage.HistoryEvent
	for h := 1; h < 7*24-1; h++ {
		hour := now.Truncate(time.Hour).Add(-time.Duration(h) * time.Hour)
		n := 0
		if hh := hour.Hour(); hh >= 7 && hh < 20 {
			n = 1 + (hh*7+h)%5
		}
		for i := range n {
			data, previous := (h+i)%2, 1-(h+i)%2
			events = append(events, storage.HistoryEvent{ID: fmt.Sprintf("seed-%d-%d", h, i), Type: "state_changed",
				SensorID: sensor, Data: &data, Previous: &previous, At: hour.Add(time.Duration(i*7) * time.Minute)})
		}
	}
	if err := history.NewClickHouseStore(env.stores.ClickHouse).InsertEvents(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	return len(events)
}

func items(list map[string]any) []any {
	v, _ := list["items"].([]any)
	return v
}

func countType(list map[string]any, typ string) int {
	n := 0
	for _, it := range items(list) {
		if m, _ := it.(map[string]any); m["type"] == typ {
			n++
		}
	}
	return n
}

// seedFleet registers the test's fleet and client through the API and waits until
// the pipeline made of it what the console must show; it returns the client's id and
// how many earlier changes it wrote into the history.
func (env *consoleNode) seedFleet(t *testing.T) (clientID string, seeded int) {
	t.Helper()
	// A sensor silent past the 3 s fleet timeout, whose state changes reach a
	// client whose webhook refuses them (400: FAILED), and three sensors with a
	// timeout of an hour: online.
	env.call("POST", "/v1/sensors", map[string]any{"id": "frontDoor", "address": "1 Main Street"}, http.StatusCreated)
	for _, id := range []string{"backDoor", "garage", "window1"} {
		env.call("POST", "/v1/sensors", map[string]any{"id": id, "address": "1 Main Street", "heartbeat_timeout": "1h"}, http.StatusCreated)
	}
	client := env.call("POST", "/v1/clients", map[string]any{"name": "Acme Security", "webhook_url": env.refuser.URL + "/hook"}, http.StatusCreated)
	clientID = client["id"].(string)
	env.call("PUT", "/v1/clients/"+clientID+"/sensors/frontDoor", nil, http.StatusNoContent)
	seeded = env.seedChanges(t, "frontDoor")
	weekAgo := time.Now().UTC().Add(-7 * 24 * time.Hour).Format(time.RFC3339)
	for _, data := range []int{1, 0, 1} {
		env.ingest(fmt.Sprintf(`{"sensor_id":"frontDoor","data":%d}`, data))
	}
	waitUntil(t, "frontDoor is lost, its 3 changes are in the history and a delivery failed", func() bool {
		s := env.call("GET", "/v1/sensors/frontDoor", nil, http.StatusOK)
		events := env.call("GET", "/v1/sensors/frontDoor/events?limit=1000&from="+weekAgo, nil, http.StatusOK)
		failed := env.call("GET", "/v1/clients/"+clientID+"/deliveries?status=FAILED", nil, http.StatusOK)
		return s["connection"] == "lost" && countType(events, "state_changed") == seeded+3 && len(items(failed)) > 0
	})
	return clientID, seeded
}

// signOutInBrowser signs out: the browser is back at sign-in, and the session's
// cookie, replayed, no longer opens the console.
func (env *consoleNode) signOutInBrowser(t *testing.T, browser context.Context) {
	t.Helper()
	base := env.base
	cookies, err := chromedp.Call(browser, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/console/"}})
	if err != nil || len(cookies.Cookies) != 1 || !cookies.Cookies[0].HTTPOnly || cookies.Cookies[0].SameSite != network.CookieSameSiteStrict {
		t.Fatalf("session cookie = %+v, %v; want one HttpOnly SameSite=Strict cookie", cookies, err)
	}
	old := cookies.Cookies[0]
	if resp := submit(t, browser, chromedp.ID("sign-out")); !strings.Contains(resp.URL, "/console/login?signed_out=1") {
		t.Fatalf("sign-out ended at %s", resp.URL)
	}
	do(t, browser, chromedp.Navigate(base+"/console/"))
	if loc := value(t, browser, chromedp.Location()); !strings.HasPrefix(loc, base+"/console/login") {
		t.Fatalf("after sign-out, /console/ went to %s", loc)
	}
	req, _ := http.NewRequest("GET", base+"/console/", nil)
	req.AddCookie(&http.Cookie{Name: old.Name, Value: old.Value})
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/console/login") {
		t.Fatalf("the signed-out cookie still opens the console: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
}
