package console_test

import (
	"context"
	"encoding/csv"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// TestSiteAndFleetDays shows a site's days and downloads them as the API's
// CSV: a loss of an hour five days ago (inside the 30 days whatever the time
// of day) adds up to 3,600 s lost over the rows.
func TestSiteAndFleetDays(t *testing.T) {
	t.Parallel()
	f := newFixture(t, adminToken, nil, false)
	ctx := context.Background()
	for _, id := range []string{"g1", "g2"} {
		if _, err := f.stores.Registry.CreateSensor(ctx, registry.Sensor{ID: id, Address: "gate " + id, Site: "yard"}); err != nil {
			t.Fatal(err)
		}
	}
	lostAt := time.Now().UTC().Add(-5 * 24 * time.Hour).Truncate(time.Second)
	if err := history.NewClickHouseStore(f.stores.ClickHouse).InsertEvents(ctx, []storage.HistoryEvent{
		{ID: "l1", Type: "connection_lost", SensorID: "g1", At: lostAt},
		{ID: "r1", Type: "connection_restored", SensorID: "g1", At: lostAt.Add(time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	c := f.browser(t)
	f.signIn(t, c)
	_, body := get(t, c, f.srv.URL+"/console/sensors/g1")
	if !strings.Contains(body, `href="/console/sites/yard"`) {
		t.Fatalf("the sensor page links no site:\n%s", body)
	}
	for _, page := range []string{"/console/sites/yard", "/console/history"} {
		resp, body := get(t, c, f.srv.URL+page)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="history-days"`) || !strings.Contains(body, "history.csv") ||
			!strings.Contains(body, "2 sensors") || !strings.Contains(body, "1:00") {
			t.Fatalf("%s = %d:\n%s", page, resp.StatusCode, body)
		}
	}
	for _, link := range []string{"/console/sites/yard/history.csv", "/console/history.csv"} {
		resp, body := get(t, c, f.srv.URL+link)
		rows, err := csv.NewReader(strings.NewReader(body)).ReadAll()
		if err != nil || resp.StatusCode != http.StatusOK || len(rows) != 31 || rows[0][7] != "lost_seconds" ||
			!strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") {
			t.Fatalf("%s = %d (%v): %q", link, resp.StatusCode, err, rows)
		}
		var lost int
		for _, r := range rows[1:] {
			n, _ := strconv.Atoi(r[7])
			lost += n
		}
		if lost != 3600 {
			t.Fatalf("%s: %d s lost over the days, want 3600", link, lost)
		}
	}
	if resp, _ := get(t, c, f.srv.URL+"/console/sites/nowhere"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an unknown site = %d, want 404", resp.StatusCode)
	}
}
