package analytics_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

func TestSensorEventsFiltersOrdersAndCollapsesReplays(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ch := stores.ClickHouse
	st := analytics.New(stores.ClickHouse.Conn(), nil)
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	one, zero := 1, 0

	// Sensor "a" has an event every minute for 10 minutes, alternating 1 and 0; the
	// first has no previous state. Sensor "b" has events in the same range that must
	// never show up for "a".
	var events []storage.HistoryEvent
	for i := range 10 {
		e := storage.HistoryEvent{ID: fmt.Sprintf("a-%02d", i), Type: "state_changed", SensorID: "a",
			At: t0.Add(time.Duration(i) * time.Minute)}
		if i%2 == 0 {
			e.Data, e.Previous = &one, &zero
		} else {
			e.Data, e.Previous = &zero, &one
		}
		if i == 0 {
			e.Previous = nil
		}
		events = append(events, e)
	}
	events = append(events,
		storage.HistoryEvent{ID: "b-lost", Type: "connection_lost", SensorID: "b", At: t0.Add(time.Minute)},
		storage.HistoryEvent{ID: "b-01", Type: "state_changed", SensorID: "b", Data: &one, At: t0.Add(2 * time.Minute)})
	for range 2 { // the second insert is a replay, in a separate part
		if err := history.NewClickHouseStore(ch).InsertEvents(ctx, events); err != nil {
			t.Fatal(err)
		}
	}

	// The whole range: every event of "a" once, newest first, with its fields.
	got, err := listEvents(ctx, st, "a", t0, t0.Add(time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 {
		t.Fatalf("%d events, want 10 (replays collapsed, other sensors left out): %+v", len(got), got)
	}
	for i, e := range got {
		w := events[9-i]
		if e.ID != w.ID || e.Type != w.Type || e.SensorID != "a" || !e.At.Equal(w.At) || e.At.Location() != time.UTC ||
			!sameInt(e.Data, w.Data) || !sameInt(e.Previous, w.Previous) {
			t.Errorf("event %d = %+v, want %+v", i, e, w)
		}
	}

	// from is inclusive, to exclusive; limit keeps the newest.
	got, err = listEvents(ctx, st, "a", t0.Add(2*time.Minute), t0.Add(7*time.Minute), 3)
	if err != nil {
		t.Fatal(err)
	}
	if ids := eventIDs(got); fmt.Sprint(ids) != "[a-06 a-05 a-04]" {
		t.Fatalf("events in [2m, 7m) limit 3 = %v, want [a-06 a-05 a-04]", ids)
	}
	got, err = listEvents(ctx, st, "a", t0.Add(2*time.Minute), t0.Add(7*time.Minute), 100)
	if err != nil {
		t.Fatal(err)
	}
	if ids := eventIDs(got); fmt.Sprint(ids) != "[a-06 a-05 a-04 a-03 a-02]" {
		t.Fatalf("events in [2m, 7m) = %v, want [a-06 a-05 a-04 a-03 a-02]", ids)
	}

	// A sensor without history and a range before any event are empty, not errors.
	for _, q := range []struct {
		sensor   string
		from, to time.Time
	}{
		{"nobody", t0, t0.Add(time.Hour)},
		{"a", t0.Add(-time.Hour), t0},
	} {
		got, err := listEvents(ctx, st, q.sensor, q.from, q.to, 100)
		if err != nil || len(got) != 0 {
			t.Fatalf("SensorEvents(%s, %s, %s) = %+v, %v; want nothing", q.sensor, q.from, q.to, got, err)
		}
	}
}

func TestSensorReadingsFiltersOrdersAndCollapsesReplays(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ch := stores.ClickHouse
	st := analytics.New(stores.ClickHouse.Conn(), nil)
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

	// Sensor "a": one reading a second for 20 s on partition 3, every other one
	// without device time, plus two readings received in the same second as the
	// last one (offsets tell them apart). Sensor "b" interleaves.
	var readings []storage.HistoryReading
	for i := range 20 {
		r := storage.HistoryReading{SensorID: "a", Data: i % 2, ReceivedAt: t0.Add(time.Duration(i) * time.Second),
			Partition: 3, Offset: int64(100 + i)}
		if i%2 == 0 {
			r.TS = r.ReceivedAt.Add(-300 * time.Millisecond).Truncate(time.Second)
		}
		readings = append(readings, r)
		readings = append(readings, storage.HistoryReading{SensorID: "b", Data: 1, ReceivedAt: r.ReceivedAt,
			Partition: 5, Offset: int64(i)})
	}
	last := t0.Add(19 * time.Second)
	readings = append(readings,
		storage.HistoryReading{SensorID: "a", Data: 1, ReceivedAt: last, Partition: 3, Offset: 120},
		storage.HistoryReading{SensorID: "a", Data: 0, ReceivedAt: last, Partition: 3, Offset: 121})
	for range 2 { // the second insert is a replay
		if err := history.NewClickHouseStore(ch).InsertReadings(ctx, readings); err != nil {
			t.Fatal(err)
		}
	}

	got, err := listReadings(ctx, st, "a", t0, t0.Add(time.Minute), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 22 {
		t.Fatalf("%d readings, want 22 (replays collapsed, other sensors left out)", len(got))
	}
	// Newest first: by receive time, then by offset within a second.
	for i := 1; i < len(got); i++ {
		prev, cur := got[i-1], got[i]
		if cur.ReceivedAt.After(prev.ReceivedAt) || cur.ReceivedAt.Equal(prev.ReceivedAt) && cur.Offset >= prev.Offset {
			t.Fatalf("readings %d and %d out of order: %+v then %+v", i-1, i, prev, cur)
		}
	}
	byOffset := map[int64]storage.HistoryReading{}
	for _, r := range readings {
		if r.SensorID == "a" {
			byOffset[r.Offset] = r
		}
	}
	for _, r := range got {
		w := byOffset[r.Offset]
		if r.SensorID != "a" || r.Data != w.Data || !r.TS.Equal(w.TS) || r.TS.IsZero() != w.TS.IsZero() ||
			!r.ReceivedAt.Equal(w.ReceivedAt) || r.ReceivedAt.Location() != time.UTC || r.Partition != 3 {
			t.Errorf("reading = %+v, want %+v", r, w)
		}
	}
	if got[0].Offset != 121 || got[1].Offset != 120 || got[2].Offset != 119 {
		t.Fatalf("newest offsets = %d, %d, %d; want 121, 120, 119", got[0].Offset, got[1].Offset, got[2].Offset)
	}

	// [5 s, 10 s) holds offsets 109 down to 105; a limit of 2 keeps 109 and 108.
	got, err = listReadings(ctx, st, "a", t0.Add(5*time.Second), t0.Add(10*time.Second), 2)
	if err != nil {
		t.Fatal(err)
	}
	if offs := readingOffsets(got); fmt.Sprint(offs) != "[109 108]" {
		t.Fatalf("offsets in [5s, 10s) limit 2 = %v, want [109 108]", offs)
	}
	got, err = listReadings(ctx, st, "a", t0.Add(5*time.Second), t0.Add(10*time.Second), 100)
	if err != nil {
		t.Fatal(err)
	}
	if offs := readingOffsets(got); fmt.Sprint(offs) != "[109 108 107 106 105]" {
		t.Fatalf("offsets in [5s, 10s) = %v, want [109 108 107 106 105]", offs)
	}

	got, err = listReadings(ctx, st, "nobody", t0, t0.Add(time.Hour), 100)
	if err != nil || len(got) != 0 {
		t.Fatalf("readings of a sensor without history = %+v, %v; want nothing", got, err)
	}
}

func eventIDs(events []storage.HistoryEvent) []string {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

func readingOffsets(readings []storage.HistoryReading) []int64 {
	offs := make([]int64, len(readings))
	for i, r := range readings {
		offs[i] = r.Offset
	}
	return offs
}

// listEvents and listReadings are the first page of a list, newest first.
func listEvents(ctx context.Context, st *analytics.Store, sensor string, from, to time.Time, limit int) ([]storage.HistoryEvent, error) {
	page, err := st.SensorEvents(ctx, analytics.ListQuery{SensorID: sensor, From: from, To: to, Limit: limit})
	return page.Items, err
}

func listReadings(ctx context.Context, st *analytics.Store, sensor string, from, to time.Time, limit int) ([]storage.HistoryReading, error) {
	page, err := st.SensorReadings(ctx, analytics.ListQuery{SensorID: sensor, From: from, To: to, Limit: limit})
	return page.Items, err
}

func sameInt(a, b *int) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// TestCursorsWalkEveryOldRowOnce walks 10,000 readings in pages of 1,000,
// newest first and then oldest first, while new readings arrive between
// pages: after the walk's end, in the very second of the page's last row
// (a higher offset) and in seconds already walked. Every reading that was
// there before the walk comes back exactly once, and no page is larger than
// asked.
func TestCursorsWalkEveryOldRowOnce(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := analytics.New(stores.ClickHouse.Conn(), nil)
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

	// Three readings a second: ties on the second are broken by offset.
	old := make([]storage.HistoryReading, 10_000)
	for i := range old {
		old[i] = storage.HistoryReading{SensorID: "c", Data: i % 2, ReceivedAt: t0.Add(time.Duration(i/3) * time.Second),
			Partition: 2, Offset: int64(i)}
	}
	if err := history.NewClickHouseStore(stores.ClickHouse).InsertReadings(ctx, old); err != nil {
		t.Fatal(err)
	}
	next := int64(len(old))
	arrive := func(last storage.HistoryReading) {
		var rows []storage.HistoryReading
		for _, at := range []time.Time{last.ReceivedAt, t0.Add(-time.Minute), t0.Add(4 * time.Hour), t0.Add(time.Hour)} {
			rows = append(rows, storage.HistoryReading{SensorID: "c", Data: 1, ReceivedAt: at, Partition: 2, Offset: next})
			next++
		}
		if err := history.NewClickHouseStore(stores.ClickHouse).InsertReadings(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	for _, asc := range []bool{false, true} {
		seen := map[int64]int{}
		q := analytics.ListQuery{SensorID: "c", From: t0.Add(-time.Hour), To: t0.Add(5 * time.Hour), Limit: 1000, Asc: asc}
		pages := 0
		for {
			page, err := st.SensorReadings(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Items) > 1000 {
				t.Fatalf("a page of %d readings, asked for 1000", len(page.Items))
			}
			for _, r := range page.Items {
				seen[r.Offset]++
			}
			pages++
			if page.NextCursor == "" {
				break
			}
			arrive(page.Items[len(page.Items)-1])
			q.Cursor = page.NextCursor
		}
		for i := range old {
			if seen[int64(i)] != 1 {
				t.Fatalf("asc=%v: reading at offset %d came back %d times in %d pages", asc, i, seen[int64(i)], pages)
			}
		}
		if pages < 10 {
			t.Fatalf("asc=%v: %d pages, want at least 10", asc, pages)
		}
	}
}

func TestEventListsFilterOrderAndRefuseForeignCursors(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := analytics.New(stores.ClickHouse.Conn(), nil)
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	one := 1
	var events []storage.HistoryEvent
	for i := range 9 {
		typ := []string{"state_changed", "connection_lost", "connection_restored"}[i%3]
		// Two events share each second: the id breaks the tie.
		events = append(events, storage.HistoryEvent{ID: fmt.Sprintf("e%d", i), Type: typ, SensorID: "a", Data: &one,
			At: t0.Add(time.Duration(i/2) * time.Second)})
	}
	if err := history.NewClickHouseStore(stores.ClickHouse).InsertEvents(ctx, events); err != nil {
		t.Fatal(err)
	}
	q := analytics.ListQuery{SensorID: "a", From: t0, To: t0.Add(time.Hour), Limit: 2, Asc: true,
		Types: []string{"connection_lost", "connection_restored"}}
	var ids []string
	for {
		page, err := st.SensorEvents(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, eventIDs(page.Items)...)
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	if fmt.Sprint(ids) != "[e1 e2 e4 e5 e7 e8]" {
		t.Fatalf("losses and restores oldest first = %v, want [e1 e2 e4 e5 e7 e8]", ids)
	}
	// A cursor of the other order, of the other list, or of nothing is refused.
	page, err := st.SensorEvents(ctx, analytics.ListQuery{SensorID: "a", From: t0, To: t0.Add(time.Hour), Limit: 2})
	if err != nil || page.NextCursor == "" {
		t.Fatalf("first page: %v, %v", page, err)
	}
	for _, q := range []analytics.ListQuery{
		{SensorID: "a", From: t0, To: t0.Add(time.Hour), Limit: 2, Asc: true, Cursor: page.NextCursor},
		{SensorID: "a", From: t0, To: t0.Add(time.Hour), Limit: 2, Cursor: "not-a-cursor"},
	} {
		if _, err := st.SensorEvents(ctx, q); !errors.Is(err, analytics.ErrBadCursor) {
			t.Errorf("SensorEvents(cursor %q, asc %v) = %v, want ErrBadCursor", q.Cursor, q.Asc, err)
		}
	}
	if _, err := st.SensorReadings(ctx, analytics.ListQuery{SensorID: "a", From: t0, To: t0.Add(time.Hour), Limit: 2,
		Cursor: page.NextCursor}); !errors.Is(err, analytics.ErrBadCursor) {
		t.Errorf("an events cursor given to readings: %v, want ErrBadCursor", err)
	}
}
