package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/storage/storagetest"
)

func TestAllSensorStatesReadsEveryRowInIDOrder(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx := context.Background()
	pg := consumer.NewPostgresStore(stores.Postgres)

	got := storagetest.AllSensorStates(t, stores.PostgresURL)
	if len(got) != 0 {
		t.Fatalf("empty table: got %+v", got)
	}

	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	changes := []consumer.StateChange{
		{SensorID: "zz", Data: 1, ChangedAt: t0, Partition: 3, Offset: 17},
		{SensorID: "aa", Data: 0, ChangedAt: t0.Add(time.Second), Partition: 0, Offset: 4},
	}
	if err := pg.ApplyStateChanges(ctx, changes); err != nil {
		t.Fatal(err)
	}
	got = storagetest.AllSensorStates(t, stores.PostgresURL)
	want := []consumer.StateChange{changes[1], changes[0]}
	if len(got) != len(want) {
		t.Fatalf("got %d states %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.SensorID != w.SensorID || g.Data != w.Data || g.Partition != w.Partition || g.Offset != w.Offset ||
			!g.ChangedAt.Equal(w.ChangedAt) {
			t.Errorf("state %d = %+v, want %+v", i, g, w)
		}
	}
}
