package webapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/storage"
)

// historyEventJSON and historyReadingJSON are history items as the API shows them;
// pointers tell null.
type historyEventJSON struct {
	ID       string    `json:"id"`
	Type     string    `json:"type"`
	SensorID string    `json:"sensor_id"`
	Data     *int      `json:"data"`
	Previous *int      `json:"previous"`
	At       time.Time `json:"at"`
}

type historyReadingJSON struct {
	SensorID   string     `json:"sensor_id"`
	Data       int        `json:"data"`
	TS         *time.Time `json:"ts"`
	ReceivedAt time.Time  `json:"received_at"`
}

type itemsJSON[T any] struct {
	Items []T `json:"items"`
}

// rangeQuery is ?from=&to=&limit= (limit 0 left out).
func rangeQuery(from, to time.Time, limit int) string {
	v := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}}
	if limit > 0 {
		v.Set("limit", fmt.Sprint(limit))
	}
	return "?" + v.Encode()
}

func TestSensorEventsHistory(t *testing.T) {
	t.Parallel()
	api := newStreamAPI(t, streamAPIOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	one, zero := 1, 0

	// Sensor "lock1": a first reading (no previous), then a change every 10
	// minutes, a loss and a restore; "lock2" interleaves and must not show.
	events := []storage.HistoryEvent{
		{ID: "e0", Type: "state_changed", SensorID: "lock1", Data: &one, At: t0},
		{ID: "e1", Type: "state_changed", SensorID: "lock1", Data: &zero, Previous: &one, At: t0.Add(10 * time.Minute)},
		{ID: "e2", Type: "state_changed", SensorID: "lock1", Data: &one, Previous: &zero, At: t0.Add(20 * time.Minute)},
		{ID: "e3", Type: "connection_lost", SensorID: "lock1", At: t0.Add(90 * time.Minute)},
		{ID: "e4", Type: "connection_restored", SensorID: "lock1", At: t0.Add(100 * time.Minute)},
		{ID: "x0", Type: "state_changed", SensorID: "lock2", Data: &one, At: t0.Add(15 * time.Minute)},
	}
	// Inserted twice, as a replay would: the API shows each event once.
	for range 2 {
		if err := history.NewClickHouseStore(api.stores.ClickHouse).InsertEvents(ctx, events); err != nil {
			t.Fatal(err)
		}
	}

	var got itemsJSON[historyEventJSON]
	resp := api.request("GET", "/v1/sensors/lock1/events"+rangeQuery(t0, t0.Add(2*time.Hour), 0), nil).expect(http.StatusOK)
	resp.decode(&got)
	if ids := historyEventIDs(got.Items); !slices.Equal(ids, []string{"e4", "e3", "e2", "e1", "e0"}) {
		t.Fatalf("events = %v, want e4 e3 e2 e1 e0 (newest first, replays collapsed)", ids)
	}
	for i, e := range got.Items {
		w := events[4-i]
		if e.Type != w.Type || e.SensorID != "lock1" || !e.At.Equal(w.At) || !sameIntPtr(e.Data, w.Data) || !sameIntPtr(e.Previous, w.Previous) {
			t.Errorf("event %d = %+v, want %+v", i, e, w)
		}
	}
	// null, not absent, where an event has no data or previous; times in UTC.
	var raw struct{ Items []map[string]any }
	resp.decode(&raw)
	if v, ok := raw.Items[4]["previous"]; !ok || v != nil {
		t.Fatalf("first event's previous = %v (present %v), want null", v, ok)
	}
	if v, ok := raw.Items[1]["data"]; !ok || v != nil {
		t.Fatalf("connection_lost's data = %v (present %v), want null", v, ok)
	}
	expectUTC(t, raw.Items[0], "at")

	// from inclusive, to exclusive.
	api.request("GET", "/v1/sensors/lock1/events"+rangeQuery(t0.Add(10*time.Minute), t0.Add(90*time.Minute), 0), nil).
		expect(http.StatusOK).decode(&got)
	if ids := historyEventIDs(got.Items); !slices.Equal(ids, []string{"e2", "e1"}) {
		t.Fatalf("events in [10m, 90m) = %v, want e2 e1", ids)
	}
	// limit keeps the newest.
	api.request("GET", "/v1/sensors/lock1/events"+rangeQuery(t0, t0.Add(2*time.Hour), 2), nil).expect(http.StatusOK).decode(&got)
	if ids := historyEventIDs(got.Items); !slices.Equal(ids, []string{"e4", "e3"}) {
		t.Fatalf("events with limit 2 = %v, want e4 e3", ids)
	}

	// No history: 200 and an empty list (not null), registered or not.
	api.createSensor("quiet", "Door 9")
	for _, id := range []string{"quiet", "neverseen"} {
		resp := api.request("GET", "/v1/sensors/"+id+"/events"+rangeQuery(t0, t0.Add(time.Hour), 0), nil).expect(http.StatusOK)
		if items, ok := resp.fields()["items"].([]any); !ok || len(items) != 0 {
			t.Fatalf("events of %s: %s, want an empty items array", id, resp.body)
		}
	}
	// An id that cannot be a sensor's is a 404.
	api.request("GET", "/v1/sensors/much_too_long_for_an_id/events", nil).expectProblem(http.StatusNotFound, "not-found")
}

func TestSensorEventsDefaultRangeIsTheLastDay(t *testing.T) {
	t.Parallel()
	api := newStreamAPI(t, streamAPIOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().UTC().Truncate(time.Second)
	one := 1
	// Hours away from the 24 h boundary, so the test does not depend on how long
	// it takes to run.
	events := []storage.HistoryEvent{
		{ID: "new", Type: "state_changed", SensorID: "s", Data: &one, At: now.Add(-time.Hour)},
		{ID: "day", Type: "state_changed", SensorID: "s", Data: &one, At: now.Add(-20 * time.Hour)},
		{ID: "old", Type: "state_changed", SensorID: "s", Data: &one, At: now.Add(-28 * time.Hour)},
	}
	if err := history.NewClickHouseStore(api.stores.ClickHouse).InsertEvents(ctx, events); err != nil {
		t.Fatal(err)
	}
	var got itemsJSON[historyEventJSON]
	api.request("GET", "/v1/sensors/s/events", nil).expect(http.StatusOK).decode(&got)
	if ids := historyEventIDs(got.Items); !slices.Equal(ids, []string{"new", "day"}) {
		t.Fatalf("default range: events = %v, want new day", ids)
	}
	// to alone: the 24 hours before it.
	to := now.Add(-10 * time.Hour)
	api.request("GET", "/v1/sensors/s/events?to="+url.QueryEscape(to.Format(time.RFC3339)), nil).expect(http.StatusOK).decode(&got)
	if ids := historyEventIDs(got.Items); !slices.Equal(ids, []string{"day", "old"}) {
		t.Fatalf("24 h before to: events = %v, want day old", ids)
	}
	// from alone: from then to now.
	from := now.Add(-30 * time.Hour)
	api.request("GET", "/v1/sensors/s/events?from="+url.QueryEscape(from.Format(time.RFC3339)), nil).expect(http.StatusOK).decode(&got)
	if ids := historyEventIDs(got.Items); !slices.Equal(ids, []string{"new", "day", "old"}) {
		t.Fatalf("from alone: events = %v, want new day old", ids)
	}
}

func TestSensorReadingsHistory(t *testing.T) {
	t.Parallel()
	api := newStreamAPI(t, streamAPIOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

	// One reading a minute for 10 minutes; odd ones carry no device time.
	var readings []storage.HistoryReading
	for i := range 10 {
		r := storage.HistoryReading{SensorID: "door", Data: i % 2, ReceivedAt: t0.Add(time.Duration(i) * time.Minute),
			Partition: 1, Offset: int64(i)}
		if i%2 == 0 {
			r.TS = r.ReceivedAt.Add(-2 * time.Second)
		}
		readings = append(readings, r)
	}
	readings = append(readings, storage.HistoryReading{SensorID: "other", Data: 1, ReceivedAt: t0.Add(time.Minute), Partition: 2})
	if err := history.NewClickHouseStore(api.stores.ClickHouse).InsertReadings(ctx, readings); err != nil {
		t.Fatal(err)
	}

	var got itemsJSON[historyReadingJSON]
	resp := api.request("GET", "/v1/sensors/door/readings"+rangeQuery(t0, t0.Add(time.Hour), 0), nil).expect(http.StatusOK)
	resp.decode(&got)
	if len(got.Items) != 10 {
		t.Fatalf("%d readings, want 10: %s", len(got.Items), resp.body)
	}
	for i, r := range got.Items {
		w := readings[9-i]
		if r.SensorID != "door" || r.Data != w.Data || !r.ReceivedAt.Equal(w.ReceivedAt) ||
			(r.TS == nil) != w.TS.IsZero() || r.TS != nil && !r.TS.Equal(w.TS) {
			t.Errorf("reading %d = %+v, want %+v", i, r, w)
		}
	}
	var raw struct{ Items []map[string]any }
	resp.decode(&raw)
	if v, ok := raw.Items[0]["ts"]; !ok || v != nil {
		t.Fatalf("a reading without device time has ts = %v (present %v), want null", v, ok)
	}
	expectUTC(t, raw.Items[1], "ts", "received_at")

	// The range selects on receive time; limit keeps the newest.
	api.request("GET", "/v1/sensors/door/readings"+rangeQuery(t0.Add(3*time.Minute), t0.Add(7*time.Minute), 3), nil).
		expect(http.StatusOK).decode(&got)
	var at []time.Time
	for _, r := range got.Items {
		at = append(at, r.ReceivedAt)
	}
	want := []time.Time{t0.Add(6 * time.Minute), t0.Add(5 * time.Minute), t0.Add(4 * time.Minute)}
	if !slices.EqualFunc(at, want, time.Time.Equal) {
		t.Fatalf("readings in [3m, 7m) limit 3 received at %v, want %v", at, want)
	}
}

func TestHistoryQueryValidation(t *testing.T) {
	t.Parallel()
	api := newStreamAPI(t, streamAPIOptions{})
	for _, c := range []struct {
		name, query string
		detail      []string
	}{
		{"from not RFC 3339", "?from=yesterday", []string{"from", "RFC 3339", "yesterday"}},
		{"to not RFC 3339", "?to=2026-11-22", []string{"to", "RFC 3339"}},
		{"from after to", "?from=2026-11-22T10:00:00Z&to=2026-11-22T09:00:00Z", []string{"from", "before", "to"}},
		{"from equals to", "?from=2026-11-22T10:00:00Z&to=2026-11-22T10:00:00Z", []string{"from", "before"}},
		{"order unknown", "?order=up", []string{"order", "asc", "desc", "up"}},
		{"cursor not a cursor", "?cursor=abc", []string{"cursor"}},
		{"limit zero", "?limit=0", []string{"limit", "1000"}},
		{"limit too large", "?limit=1001", []string{"limit", "1001"}},
		{"limit not a number", "?limit=ten", []string{"limit", "ten"}},
	} {
		for _, route := range []string{"events", "readings"} {
			t.Run(c.name+"/"+route, func(t *testing.T) {
				api := *api
				api.t = t
				api.request("GET", "/v1/sensors/s1/"+route+c.query, nil).
					expectProblem(http.StatusBadRequest, "invalid-parameter", c.detail...)
			})
		}
	}
	// The limits themselves are fine, and a range has no longest length: a
	// page is bounded by rows.
	api.request("GET", "/v1/sensors/s1/events?limit=1000&from=2000-01-01T00:00:00Z&to=2026-11-22T00:00:00Z", nil).expect(http.StatusOK)
	api.request("GET", "/v1/sensors/s1/readings?limit=1&order=asc", nil).expect(http.StatusOK)
	// type is for events, and names event types.
	api.request("GET", "/v1/sensors/s1/events?type=state_changed,connection_lost", nil).expect(http.StatusOK)
	api.request("GET", "/v1/sensors/s1/events?type=state_changed,opened", nil).
		expectProblem(http.StatusBadRequest, "invalid-parameter", "type", "opened")
	api.request("GET", "/v1/sensors/s1/readings?type=state_changed", nil).
		expectProblem(http.StatusBadRequest, "invalid-parameter", "type")
}

func TestHistoryDisabled(t *testing.T) {
	t.Parallel()
	api := newStreamAPI(t, streamAPIOptions{noHistory: true})
	for _, route := range []string{"events", "readings"} {
		api.request("GET", "/v1/sensors/s1/"+route, nil).expectProblem(http.StatusServiceUnavailable, "unavailable", "history")
	}
}

func historyEventIDs(events []historyEventJSON) []string {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

func sameIntPtr(a, b *int) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
