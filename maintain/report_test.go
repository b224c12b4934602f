package maintain_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/maintain"
	"github.com/lockstream/lockstream/notifier/email"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
)

const adminToken = "report-test-admin-token"

// The reported week: Monday 16 to Monday 23 November 2026 in Paris (CET, no
// DST change), [15 Nov 23:00 UTC, 22 Nov 23:00 UTC); its report is due
// Monday 23 November 08:00 Paris, 07:00 UTC. Fixed dates: the test does not
// depend on today's.
var (
	paris     = mustLocation("Europe/Paris")
	weekFrom  = time.Date(2026, 11, 16, 0, 0, 0, 0, paris)
	weekTo    = time.Date(2026, 11, 23, 0, 0, 0, 0, paris)
	reportDue = time.Date(2026, 11, 23, 8, 0, 0, 0, paris)
)

func mustLocation(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// reportHistory writes the week's history: s1 lost 2 h 30 min (the outage of
// site yard), s2 unlocked 1 h and lost 10 min; readings on both.
func reportHistory(t *testing.T, ctx context.Context, stores *storagetest.Stores) {
	t.Helper()
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	zero, one := 0, 1
	events := []storage.HistoryEvent{
		{ID: "e1", Type: "state_changed", SensorID: "s1", Data: &one, At: at("2026-11-10T12:00:00Z")},
		{ID: "e2", Type: "state_changed", SensorID: "s2", Data: &one, At: at("2026-11-10T12:00:00Z")},
		{ID: "e3", Type: "connection_lost", SensorID: "s1", Data: &one, At: at("2026-11-17T10:00:00Z")},
		{ID: "e4", Type: "connection_restored", SensorID: "s1", Data: &one, At: at("2026-11-17T12:30:00Z")},
		{ID: "e5", Type: "state_changed", SensorID: "s2", Data: &zero, Previous: &one, At: at("2026-11-18T08:00:00Z")},
		{ID: "e6", Type: "state_changed", SensorID: "s2", Data: &one, Previous: &zero, At: at("2026-11-18T09:00:00Z")},
		{ID: "e7", Type: "connection_lost", SensorID: "s2", Data: &one, At: at("2026-11-19T00:00:00Z")},
		{ID: "e8", Type: "connection_restored", SensorID: "s2", Data: &one, At: at("2026-11-19T00:10:00Z")},
	}
	var readings []storage.HistoryReading
	for i, when := range []string{"2026-11-16T08:00:00Z", "2026-11-18T08:00:00Z", "2026-11-20T08:00:00Z"} {
		readings = append(readings, storage.HistoryReading{SensorID: "s1", ReceivedAt: at(when), Partition: 1, Offset: int64(i)})
	}
	h := history.NewClickHouseStore(stores.ClickHouse)
	if err := h.InsertEvents(ctx, events); err != nil {
		t.Fatal(err)
	}
	if err := h.InsertReadings(ctx, readings); err != nil {
		t.Fatal(err)
	}
	if _, err := stores.Postgres.Pool().Exec(ctx, `INSERT INTO site_outages (id, site, started_at, sensors, restored_at)
		VALUES ('o1', 'yard', '2026-11-17T10:00:00Z', '{s1,s2}', '2026-11-17T12:30:00Z')`); err != nil {
		t.Fatal(err)
	}
}

// api sends one admin request to the test API and decodes its JSON answer.
func api(t *testing.T, base, method, path, body string, out any) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s %s: %v in %s", method, path, err, raw)
	}
}

// TestWeeklyReportMailedOnce: a client that turned the weekly report on (by
// PATCH, in Paris) gets exactly one email for the week — text and HTML
// parts saying the figures GET /v1/clients/{id}/report answers for the same
// week — when the report round runs twice at Monday 08:00 Paris and once
// more from a second maintainer (another process, or one restarted); nothing
// before 08:00 nor once the lateness has passed; and a client with an email
// but the report off gets none.
func TestWeeklyReportMailedOnce(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	pg := stores.Postgres
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, id := range []string{"s1", "s2"} {
		if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: id, Address: "door " + id, Site: "yard"}); err != nil {
			t.Fatal(err)
		}
	}
	on, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "Acme <Doors>", Email: "owner@acme.example"})
	if err != nil {
		t.Fatal(err)
	}
	off, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "Quiet", Email: "owner@quiet.example"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{on.ID, off.ID} {
		for _, s := range []string{"s1", "s2"} {
			if err := registry.New(pg).LinkSensor(ctx, c, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	reportHistory(t, ctx, stores)

	scopes := analytics.NewPostgresScopes(pg.Pool())
	source := analytics.New(stores.ClickHouse.Conn(), scopes, analytics.WithOutages(scopes))
	reg := prometheus.NewRegistry()
	server, err := webapi.New(webapi.Config{AdminToken: adminToken}, registry.New(pg), nil, reg, reg, nil, webapi.WithAnalytics(source))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.Handler())
	defer ts.Close()
	var client struct {
		Report struct {
			Weekly   bool   `json:"weekly"`
			Timezone string `json:"timezone"`
		} `json:"report"`
	}
	api(t, ts.URL, http.MethodPatch, "/v1/clients/"+on.ID, `{"report":{"weekly":true,"timezone":"Europe/Paris"}}`, &client)
	if !client.Report.Weekly || client.Report.Timezone != "Europe/Paris" {
		t.Fatalf("PATCH answered report %+v", client.Report)
	}

	now := reportDue.Add(-time.Minute)
	maintainer := func() *maintain.Maintainer {
		mt, err := maintain.New(maintain.Config{Now: func() time.Time { return now }}, maintain.NewPostgresStore(pg), nil,
			prometheus.NewRegistry(), nil, maintain.WithReports(maintain.NewPostgresStore(pg), source))
		if err != nil {
			t.Fatal(err)
		}
		return mt
	}
	first, second := maintainer(), maintainer()
	round := func(mt *maintain.Maintainer, want int) {
		t.Helper()
		n, err := mt.RunReports(ctx)
		if err != nil || n != want {
			t.Fatalf("at %s: RunReports = %d, %v; want %d", now, n, err, want)
		}
	}
	round(first, 0) // 07:59 Paris: not due yet
	now = reportDue
	round(first, 1)
	round(first, 0)
	now = reportDue.Add(30 * time.Minute)
	round(second, 0)
	now = reportDue.Add(maintain.DefaultReportLateness + time.Hour)
	round(second, 0) // Tuesday: past the lateness (and written anyway)

	var deliveries []struct{ id, client, target string }
	rows, err := pg.Pool().Query(ctx, `SELECT id::text, client_id::text, target FROM deliveries WHERE event_type = 'weekly_report'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var d struct{ id, client, target string }
		if err := rows.Scan(&d.id, &d.client, &d.target); err != nil {
			t.Fatal(err)
		}
		deliveries = append(deliveries, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(deliveries) != 1 || deliveries[0].client != on.ID || deliveries[0].target != "report:2026-11-16" {
		t.Fatalf("weekly report deliveries = %+v; want one to client %s for report:2026-11-16", deliveries, on.ID)
	}

	msgs := sendOutbox(t, ctx, stores, map[string]string{deliveries[0].id: "SENT"})
	if len(msgs) != 1 {
		t.Fatalf("%d emails sent; want exactly 1", len(msgs))
	}
	if msgs[0].to != "owner@acme.example" {
		t.Errorf("mailed to %q", msgs[0].to)
	}
	text, html, msgID := parseReportMail(t, msgs[0].data)
	if !strings.Contains(msgID, deliveries[0].id) {
		t.Errorf("Message-ID %q does not name delivery %s", msgID, deliveries[0].id)
	}

	var rep struct {
		Sensors int `json:"sensors"`
		Total   struct {
			Readings, Changes, Unlocks, Losses, Restores int64
			UnlockedSeconds                              int64    `json:"unlocked_seconds"`
			LostSeconds                                  int64    `json:"lost_seconds"`
			MeanRestoreSeconds                           *float64 `json:"mean_restore_seconds"`
			Availability                                 *float64 `json:"availability"`
		} `json:"total"`
		LostLongest []struct {
			SensorID string `json:"sensor_id"`
			Value    int64
		} `json:"lost_longest"`
		UnlockedLongest []struct {
			SensorID string `json:"sensor_id"`
			Value    int64
		} `json:"unlocked_longest"`
		SiteOutages []struct {
			Site    string `json:"site"`
			Sensors int    `json:"sensors"`
			Seconds int64  `json:"seconds"`
		} `json:"site_outages"`
	}
	q := url.Values{"from": {weekFrom.Format(time.RFC3339)}, "to": {weekTo.Format(time.RFC3339)}, "tz": {"Europe/Paris"}}
	api(t, ts.URL, http.MethodGet, "/v1/clients/"+on.ID+"/report?"+q.Encode(), "", &rep)
	// The week's figures by hand, so that agreeing with GET report means something.
	if rep.Total.LostSeconds != 9000+600 || rep.Total.UnlockedSeconds != 3600 || rep.Total.Losses != 2 ||
		rep.Total.Restores != 2 || rep.Total.Readings != 3 || rep.Sensors != 2 || len(rep.SiteOutages) != 1 ||
		rep.SiteOutages[0].Seconds != 9000 || len(rep.LostLongest) != 2 || len(rep.UnlockedLongest) != 1 ||
		rep.Total.Availability == nil || *rep.Total.Availability != 1-9600.0/(2*7*86400) {
		t.Fatalf("GET report is not the week's figures: %+v", rep)
	}
	wants := []string{
		"Availability:           " + analytics.Percent(rep.Total.Availability),
		fmt.Sprintf("Readings:               %d", rep.Total.Readings),
		fmt.Sprintf("State changes:          %d", rep.Total.Changes),
		fmt.Sprintf("Unlocks:                %d", rep.Total.Unlocks),
		"Time unlocked:          " + analytics.Duration(rep.Total.UnlockedSeconds),
		fmt.Sprintf("Connection losses:      %d", rep.Total.Losses),
		"Time lost:              " + analytics.Duration(rep.Total.LostSeconds),
		fmt.Sprintf("Restores:               %d", rep.Total.Restores),
		"Mean time to restore:   " + analytics.Duration(int64(*rep.Total.MeanRestoreSeconds+0.5)),
		fmt.Sprintf("site %s: Tue 17 Nov 11:00 to Tue 17 Nov 13:30, %d sensors, %s in the week",
			rep.SiteOutages[0].Site, rep.SiteOutages[0].Sensors, analytics.Duration(rep.SiteOutages[0].Seconds)),
	}
	for _, it := range rep.LostLongest {
		wants = append(wants, "sensor "+it.SensorID+": "+analytics.Duration(it.Value))
	}
	for _, it := range rep.UnlockedLongest {
		wants = append(wants, "sensor "+it.SensorID+": "+analytics.Duration(it.Value))
	}
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("the text part lacks %q:\n%s", want, text)
		}
	}
	for _, want := range []string{"Acme &lt;Doors&gt;", analytics.Percent(rep.Total.Availability),
		analytics.Duration(rep.Total.LostSeconds), "sensor s1: " + analytics.Duration(9000)} {
		if !strings.Contains(html, want) {
			t.Errorf("the HTML part lacks %q:\n%s", want, html)
		}
	}
	// This reporter reads no incident box: the section says none (the listing
	// itself: analytics' TestReportIncidentSecondsAndMail).
	unix := strings.NewReplacer("\r\n", "\n")
	if !strings.Contains(unix.Replace(text), "Incidents\n  none\n") || !strings.Contains(unix.Replace(html), "<h2>Incidents</h2>\n<p>None.</p>") {
		t.Errorf("the mail lacks an incidents section saying none:\n%s\n%s", text, html)
	}
}

// sentMail is one message the SMTP sink accepted.
type sentMail struct {
	to   string
	data []byte
}

// sendOutbox runs a retrier with a real email sender against an SMTP sink
// until each delivery of want is in its state, and returns every message
// the sink got.
func sendOutbox(t *testing.T, ctx context.Context, stores *storagetest.Stores, want map[string]string) []sentMail {
	t.Helper()
	sink := &mailSink{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &sinkSession{sink: sink}, nil }))
	srv.Domain = "localhost"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close(); <-served }()

	sender, err := email.New(email.Config{SMTPURL: "smtp://" + ln.Addr().String(), From: "lockstream@test.example"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := retrier.New(retrier.Config{PollInterval: 50 * time.Millisecond}, retrier.Deps{Store: stores.Postgres,
		Attempts: stores.ClickHouse, Email: sender}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	states := func() map[string]string {
		got := map[string]string{}
		for id := range want {
			var state, lastErr string
			if err := stores.Postgres.Pool().QueryRow(ctx, `SELECT state, last_error FROM deliveries WHERE id = $1`, id).
				Scan(&state, &lastErr); err != nil {
				t.Fatal(err)
			}
			got[id] = state
			if state != want[id] {
				got[id] += " (" + lastErr + ")"
			}
		}
		return got
	}
	got := states()
	for deadline := time.Now().Add(time.Minute); !maps.Equal(got, want) && time.Now().Before(deadline); got = states() {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("deliveries are %v; want %v", got, want)
	}
	return sink.all()
}

type mailSink struct {
	mu   sync.Mutex
	msgs []sentMail
}

func (s *mailSink) all() []sentMail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sentMail(nil), s.msgs...)
}

type sinkSession struct {
	sink *mailSink
	to   string
}

func (s *sinkSession) Mail(string, *smtp.MailOptions) error { return nil }
func (s *sinkSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = to
	return nil
}
func (s *sinkSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.sink.mu.Lock()
	defer s.sink.mu.Unlock()
	s.sink.msgs = append(s.sink.msgs, sentMail{to: s.to, data: data})
	return nil
}
func (s *sinkSession) Reset()        {}
func (s *sinkSession) Logout() error { return nil }

// parseReportMail returns the text and HTML parts of a multipart/alternative
// message, and its Message-ID.
func parseReportMail(t *testing.T, data []byte) (text, html, msgID string) {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mediaType != "multipart/alternative" {
		t.Fatalf("Content-Type %q (%v); want multipart/alternative", msg.Header.Get("Content-Type"), err)
	}
	parts := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := parts.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		switch ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type")); ct {
		case "text/plain":
			text = string(body)
		case "text/html":
			html = string(body)
		}
	}
	if text == "" || html == "" {
		t.Fatalf("the mail lacks a text or an HTML part:\n%s", data)
	}
	return text, html, msg.Header.Get("Message-Id")
}

// TestWeeklyReportFollowsTheClient: a report is sent to the client's address
// as it is at sending time; one whose client removed its address fails as
// NO_ADDRESS, one whose client was deleted as NOT_OWNED (its report went with
// it); nothing is mailed for either.
func TestWeeklyReportFollowsTheClient(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	pg := stores.Postgres
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reports := maintain.NewPostgresStore(pg)
	want := map[string]string{}
	for _, c := range []struct{ name, state string }{{"moved", "SENT"}, {"no-address", "FAILED"}, {"deleted", "FAILED"}} {
		client, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: c.name, Email: "old@" + c.name + ".example"})
		if err != nil {
			t.Fatal(err)
		}
		id, err := reports.EnqueueWeeklyReport(ctx, maintain.WeeklyReport{ClientID: client.ID, Week: weekFrom, Timezone: "Europe/Paris",
			DueAt: reportDue, Subject: "report of " + c.name, Text: "text", HTML: "<p>html</p>"}, reportDue)
		if err != nil || id == "" {
			t.Fatalf("enqueueing: %q, %v", id, err)
		}
		want[id] = c.state
		switch c.name {
		case "moved":
			addr := "new@moved.example"
			_, err = registry.New(pg).UpdateClient(ctx, client.ID, registry.ClientUpdate{Email: &addr})
		case "no-address":
			none := ""
			_, err = registry.New(pg).UpdateClient(ctx, client.ID, registry.ClientUpdate{Email: &none})
		case "deleted":
			err = registry.New(pg).DeleteClient(ctx, client.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	msgs := sendOutbox(t, ctx, stores, want)
	if len(msgs) != 1 || msgs[0].to != "new@moved.example" {
		t.Fatalf("mailed %+v; want one email to new@moved.example", msgs)
	}
	rows, err := pg.Pool().Query(ctx, `SELECT last_error FROM deliveries WHERE state = 'FAILED' ORDER BY last_error`)
	if err != nil {
		t.Fatal(err)
	}
	var errs []string
	for rows.Next() {
		var e string
		if err := rows.Scan(&e); err != nil {
			t.Fatal(err)
		}
		errs = append(errs, e)
	}
	if len(errs) != 2 || !strings.Contains(errs[0], "no email address") || !strings.Contains(errs[1], "deleted") {
		t.Errorf("failed deliveries' errors = %q", errs)
	}
}
