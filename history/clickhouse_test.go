package history_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstream/lockstream/history"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

func TestHistoryInsertsCollapseReplays(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx := context.Background()
	ch := history.NewClickHouseStore(stores.ClickHouse)
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	one, zero := 1, 0

	readings := []storage.HistoryReading{
		{SensorID: "a", Data: 1, TS: t0.Add(-time.Second), ReceivedAt: t0, Partition: 0, Offset: 0},
		{SensorID: "b", Data: 0, ReceivedAt: t0.Add(time.Second), Partition: 0, Offset: 1},
	}
	events := []storage.HistoryEvent{
		{ID: "e1", Type: "state_changed", SensorID: "a", Data: &one, At: t0},
		{ID: "e2", Type: "state_changed", SensorID: "a", Data: &zero, Previous: &one, At: t0.Add(time.Minute)},
		{ID: "e3", Type: "connection_lost", SensorID: "b", At: t0.Add(time.Hour)},
	}
	for range 2 { // the second round is a replay
		if err := ch.InsertReadings(ctx, readings); err != nil {
			t.Fatal(err)
		}
		if err := ch.InsertEvents(ctx, events); err != nil {
			t.Fatal(err)
		}
	}

	gotReadings := storagetest.AllReadings(t, stores.ClickHouseURL)
	if len(gotReadings) != len(readings) {
		t.Fatalf("%d readings after a replay, want %d: %+v", len(gotReadings), len(readings), gotReadings)
	}
	for i, r := range gotReadings {
		w := readings[i]
		if r.SensorID != w.SensorID || r.Data != w.Data || !r.TS.Equal(w.TS) || !r.ReceivedAt.Equal(w.ReceivedAt) ||
			r.Partition != w.Partition || r.Offset != w.Offset {
			t.Errorf("reading %d = %+v, want %+v", i, r, w)
		}
	}
	gotEvents := storagetest.AllEvents(t, stores.ClickHouseURL)
	if len(gotEvents) != len(events) {
		t.Fatalf("%d events after a replay, want %d", len(gotEvents), len(events))
	}
	for i, e := range gotEvents {
		w := events[i]
		if e.ID != w.ID || e.Type != w.Type || e.SensorID != w.SensorID || !e.At.Equal(w.At) ||
			!sameInt(e.Data, w.Data) || !sameInt(e.Previous, w.Previous) {
			t.Errorf("event %d = %+v, want %+v", i, e, w)
		}
	}
}

func sameInt(a, b *int) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
