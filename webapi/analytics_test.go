package webapi_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/webapi"
)

// analyticsAPI is an API with the analytics routes on the test's stores, its
// clock fixed after the history the tests write.
func analyticsAPI(t *testing.T) *testAPI {
	t.Helper()
	var a *analytics.Store
	api := newStreamAPI(t, streamAPIOptions{opts: []webapi.Option{webapi.WithAnalytics(analyticsOf(&a))}})
	pg := analytics.NewPostgresScopes(api.stores.Postgres.Pool())
	a = analytics.New(api.stores.ClickHouse.Conn(), pg, analytics.WithOutages(pg),
		analytics.WithClock(func() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }))
	return api
}

// analyticsOf defers to *a, set once the test's stores exist.
func analyticsOf(a **analytics.Store) webapi.Analytics { return lateAnalytics{a} }

type lateAnalytics struct{ a **analytics.Store }

func (l lateAnalytics) Summary(ctx context.Context, q analytics.SummaryQuery) (analytics.Summary, error) {
	return (*l.a).Summary(ctx, q)
}
func (l lateAnalytics) Top(ctx context.Context, q analytics.TopQuery) ([]analytics.TopItem, error) {
	return (*l.a).Top(ctx, q)
}
func (l lateAnalytics) Export(ctx context.Context, q analytics.ExportQuery, row func(analytics.ExportRow) error) error {
	return (*l.a).Export(ctx, q, row)
}
func (l lateAnalytics) Report(ctx context.Context, q analytics.ReportQuery) (analytics.Report, error) {
	return (*l.a).Report(ctx, q)
}

// TestAnalyticsRoutes runs summary (JSON and CSV), top, export (CSV, NDJSON,
// gzip) and a client's report over a small history: door1 unlocked for an
// hour on 25 Oct 2026 (the Paris DST day) and lost for 30 minutes.
func TestAnalyticsRoutes(t *testing.T) {
	t.Parallel()
	api := analyticsAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	api.createSensor("door1", "1 Main St")
	api.createSensor("door2", "2 Main St")
	client := api.createClient("acme")
	api.request("PUT", "/v1/clients/"+client.ID+"/sensors/door1", nil).expect(http.StatusNoContent)
	at := func(s string) time.Time { t, _ := time.Parse(time.RFC3339, s); return t }
	zero, one := 0, 1
	if err := history.NewClickHouseStore(api.stores.ClickHouse).InsertEvents(ctx, []storage.HistoryEvent{
		{ID: "e1", Type: "state_changed", SensorID: "door1", Data: &zero, At: at("2026-10-25T09:00:00Z")},
		{ID: "e2", Type: "state_changed", SensorID: "door1", Data: &one, Previous: &zero, At: at("2026-10-25T10:00:00Z")},
		{ID: "e3", Type: "connection_lost", SensorID: "door1", At: at("2026-10-25T12:00:00Z")},
		{ID: "e4", Type: "connection_restored", SensorID: "door1", At: at("2026-10-25T12:30:00Z")},
	}); err != nil {
		t.Fatal(err)
	}
	if err := history.NewClickHouseStore(api.stores.ClickHouse).InsertReadings(ctx, []storage.HistoryReading{
		{SensorID: "door1", Data: 0, ReceivedAt: at("2026-10-25T09:00:00Z"), Offset: 1},
		{SensorID: "door1", Data: 1, ReceivedAt: at("2026-10-25T10:00:00Z"), Offset: 2},
	}); err != nil {
		t.Fatal(err)
	}
	const rng = "&from=2026-10-24T00:00:00%2B02:00&to=2026-10-26T00:00:00%2B01:00"

	var sum struct {
		Scope, Bucket, TZ string
		Sensors           int
		Buckets           []map[string]any
		Total             map[string]any
	}
	api.request("GET", "/v1/analytics/summary?scope=fleet&bucket=1d&tz=Europe/Paris"+rng, nil).expect(http.StatusOK).decode(&sum)
	if sum.Scope != "fleet" || sum.Bucket != "1d" || sum.TZ != "Europe/Paris" || sum.Sensors != 2 || len(sum.Buckets) != 2 {
		t.Fatalf("summary: %+v", sum)
	}
	day := sum.Buckets[1]
	if day["start"] != "2026-10-25T00:00:00+02:00" || day["end"] != "2026-10-26T00:00:00+01:00" || day["unlocked_seconds"] != 3600.0 ||
		day["lost_seconds"] != 1800.0 || day["mean_restore_seconds"] != 1800.0 || day["readings"] != 2.0 ||
		day["availability"] != 1-1800/(2*90000.0) {
		t.Fatalf("25 Oct: %v", day)
	}
	if v, ok := sum.Buckets[0]["mean_restore_seconds"]; !ok || v != nil {
		t.Fatalf("a day without restores: mean_restore_seconds %v (present %v), want null", v, ok)
	}

	resp := api.request("GET", "/v1/analytics/summary?scope=sensor:door1&bucket=1d&tz=Europe/Paris&format=csv"+rng, nil)
	rows, err := csv.NewReader(strings.NewReader(string(resp.body))).ReadAll()
	if err != nil || resp.status != http.StatusOK || len(rows) != 3 || strings.Join(rows[0], ",") !=
		"start,end,readings,changes,unlocks,unlocked_seconds,losses,lost_seconds,restores,mean_restore_seconds,availability" ||
		rows[2][5] != "3600" || rows[1][9] != "" || !strings.HasPrefix(resp.header.Get("Content-Type"), "text/csv") {
		t.Fatalf("summary CSV (%v): %q", err, rows)
	}

	var top struct {
		By    string
		Items []struct {
			SensorID string `json:"sensor_id"`
			Value    int64
		}
	}
	api.request("GET", "/v1/analytics/top?scope=fleet&by=lost_seconds&limit=1"+rng, nil).expect(http.StatusOK).decode(&top)
	if top.By != "lost_seconds" || len(top.Items) != 1 || top.Items[0].SensorID != "door1" || top.Items[0].Value != 1800 {
		t.Fatalf("top: %+v", top)
	}

	resp = api.request("GET", "/v1/analytics/export?scope=site:none&kind=events"+rng, nil)
	resp.expectProblem(http.StatusNotFound, "not-found", "site:none")
	resp = api.request("GET", "/v1/analytics/export?scope=fleet&kind=events"+rng, nil)
	if resp.status != http.StatusOK || string(resp.body) != "id,type,sensor_id,data,previous,at\ne1,state_changed,door1,0,,2026-10-25T09:00:00Z\n"+
		"e2,state_changed,door1,1,0,2026-10-25T10:00:00Z\ne3,connection_lost,door1,,,2026-10-25T12:00:00Z\n"+
		"e4,connection_restored,door1,,,2026-10-25T12:30:00Z\n" || !strings.HasPrefix(resp.header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("events CSV: %q", resp.body)
	}
	// NDJSON, gzip: read it as a client that asked for gzip would.
	req, _ := http.NewRequestWithContext(ctx, "GET", api.url+"/v1/analytics/export?scope=client:"+client.ID+"&kind=readings&format=ndjson"+rng, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept-Encoding", "gzip")
	raw, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Body.Close()
	if raw.StatusCode != http.StatusOK || raw.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip export: %d %v", raw.StatusCode, raw.Header)
	}
	gz, err := gzip.NewReader(raw.Body)
	if err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	for sc := bufio.NewScanner(gz); sc.Scan(); {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("NDJSON line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 || lines[0]["sensor_id"] != "door1" || lines[0]["ts"] != nil || lines[1]["received_at"] != "2026-10-25T10:00:00Z" {
		t.Fatalf("readings NDJSON: %v", lines)
	}
	_, _ = io.Copy(io.Discard, gz)

	var rep struct {
		ClientID        string `json:"client_id"`
		Sensors         int
		Total           map[string]any
		LostLongest     []map[string]any `json:"lost_longest"`
		UnlockedLongest []map[string]any `json:"unlocked_longest"`
		SiteOutages     []any            `json:"site_outages"`
		Incidents       []any
	}
	api.request("GET", "/v1/clients/"+client.ID+"/report?tz=Europe/Paris"+rng, nil).expect(http.StatusOK).decode(&rep)
	if rep.ClientID != client.ID || rep.Sensors != 1 || rep.Total["lost_seconds"] != 1800.0 || len(rep.LostLongest) != 1 ||
		rep.UnlockedLongest[0]["value"] != 3600.0 || rep.SiteOutages == nil || rep.Incidents == nil || len(rep.Incidents) != 0 {
		t.Fatalf("report: %+v", rep)
	}
}

// TestAnalyticsParameters checks that every bad parameter is a 400 naming
// it, and every unknown scope a 404.
func TestAnalyticsParameters(t *testing.T) {
	t.Parallel()
	api := analyticsAPI(t)
	api.createSensor("door1", "1 Main St")
	for _, c := range []struct{ query, param string }{
		{"summary?", "scope"},
		{"summary?scope=door1", "scope"},
		{"summary?scope=sensor:no-such!", "scope"},
		{"summary?scope=fleet&bucket=2h", "bucket"},
		{"summary?scope=fleet&tz=Mars/Olympus", "tz"},
		{"summary?scope=fleet&from=yesterday", "from"},
		{"summary?scope=fleet&from=2026-10-02T00:00:00Z&to=2026-10-01T00:00:00Z", "from"},
		{"summary?scope=fleet&bucket=1m&from=2020-01-01T00:00:00Z&to=2026-10-01T00:00:00Z", "bucket"},
		{"summary?scope=fleet&format=xml", "format"},
		{"top?scope=fleet", "by"},
		{"top?scope=fleet&by=readings", "by"},
		{"top?scope=fleet&by=changes&limit=1001", "limit"},
		{"export?scope=fleet", "kind"},
		{"export?scope=fleet&kind=events&format=csv2", "format"},
	} {
		api.request("GET", "/v1/analytics/"+c.query, nil).expectProblem(http.StatusBadRequest, "invalid-parameter", c.param)
	}
	for _, scope := range []string{"sensor:nosuch", "site:nowhere", "client:6f1c6f1e-0000-4000-8000-000000000000"} {
		api.request("GET", "/v1/analytics/summary?scope="+scope, nil).expectProblem(http.StatusNotFound, "not-found", scope)
	}
	api.request("GET", "/v1/clients/6f1c6f1e-0000-4000-8000-000000000000/report", nil).expectProblem(http.StatusNotFound, "not-found")
	api.request("GET", "/v1/clients/6f1c6f1e-0000-4000-8000-000000000000/report?tz=Nowhere", nil).
		expectProblem(http.StatusBadRequest, "invalid-parameter", "tz")
	api.request("GET", "/v1/analytics/summary?scope=sensor:door1", nil, "Authorization", "Bearer nope").expect(http.StatusUnauthorized)
}
