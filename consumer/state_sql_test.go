package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage/storagetest"
)

func TestStateChangesNeverGoBackwards(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx := context.Background()
	pg := consumer.NewPostgresStore(stores.Postgres)
	if _, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: "reg1", Address: "1 Main St"}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

	got, err := pg.LookupSensors(ctx, []string{"reg1", "other", "reg1"})
	if err != nil {
		t.Fatal(err)
	}
	// One entry per id, in order, repeats included, whatever the ids hold.
	odd, err := pg.LookupSensors(ctx, []string{"a,reg1", "", "reg1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(odd) != 3 || odd[0].SensorID != "a,reg1" || odd[0].Registered || odd[1].SensorID != "" ||
		odd[1].Registered || odd[2].SensorID != "reg1" || !odd[2].Registered {
		t.Fatalf("lookup of odd ids = %+v", odd)
	}
	if len(got) != 3 || got[0].SensorID != "reg1" || !got[0].Registered || got[0].State != nil ||
		got[1].SensorID != "other" || got[1].Registered || got[1].State != nil ||
		got[2].SensorID != "reg1" || !got[2].Registered || got[2].State != nil {
		t.Fatalf("fresh lookup = %+v", got)
	}

	apply := func(changes ...consumer.StateChange) {
		t.Helper()
		if err := pg.ApplyStateChanges(ctx, changes); err != nil {
			t.Fatal(err)
		}
	}
	want := func(id string, data int, partition int32, offset int64) {
		t.Helper()
		got, err := pg.LookupSensors(ctx, []string{id})
		if err != nil {
			t.Fatal(err)
		}
		s := got[0].State
		if len(got) != 1 || got[0].SensorID != id || s == nil || s.Data != data || s.Partition != partition || s.Offset != offset {
			t.Fatalf("state of %s = %+v, want data %d at %d/%d", id, s, data, partition, offset)
		}
	}

	// Repeats of one sensor in a batch: the highest offset wins.
	apply(
		consumer.StateChange{SensorID: "reg1", Data: 1, ChangedAt: t0, Partition: 3, Offset: 10},
		consumer.StateChange{SensorID: "reg1", Data: 0, ChangedAt: t0.Add(time.Second), Partition: 3, Offset: 12},
		consumer.StateChange{SensorID: "other", Data: 1, ChangedAt: t0, Partition: 5, Offset: 7},
	)
	want("reg1", 0, 3, 12)
	want("other", 1, 5, 7)
	both, err := pg.LookupSensors(ctx, []string{"other", "reg1", "nobody", "other"})
	if err != nil {
		t.Fatal(err)
	}
	if len(both) != 4 || both[0].State == nil || both[0].State.Offset != 7 || both[0].Registered ||
		both[1].State == nil || both[1].State.Offset != 12 || !both[1].Registered ||
		both[2].State != nil || both[3].State == nil || both[3].State.Offset != 7 {
		t.Fatalf("lookup of several sensors = %+v", both)
	}

	// A replay of an older offset on the same partition is ignored.
	apply(consumer.StateChange{SensorID: "reg1", Data: 1, ChangedAt: t0.Add(time.Hour), Partition: 3, Offset: 11})
	want("reg1", 0, 3, 12)
	// A newer offset applies.
	apply(consumer.StateChange{SensorID: "reg1", Data: 1, ChangedAt: t0.Add(2 * time.Second), Partition: 3, Offset: 40})
	want("reg1", 1, 3, 40)
	// From another partition, time decides.
	apply(consumer.StateChange{SensorID: "reg1", Data: 0, ChangedAt: t0, Partition: 4, Offset: 99})
	want("reg1", 1, 3, 40)
	apply(consumer.StateChange{SensorID: "reg1", Data: 0, ChangedAt: t0.Add(time.Minute), Partition: 4, Offset: 1})
	want("reg1", 0, 4, 1)
	// Several batches' changes stored at once, a sensor's from two partitions
	// (it moved): time decides among them too, not the offset.
	apply(
		consumer.StateChange{SensorID: "reg1", Data: 1, ChangedAt: t0.Add(3 * time.Minute), Partition: 6, Offset: 2},
		consumer.StateChange{SensorID: "reg1", Data: 0, ChangedAt: t0.Add(2 * time.Minute), Partition: 4, Offset: 50},
	)
	want("reg1", 1, 6, 2)

	got, err = pg.LookupSensors(ctx, []string{"reg1"})
	if err != nil {
		t.Fatal(err)
	}
	if s := got[0].State; !s.ChangedAt.Equal(t0.Add(3 * time.Minute)) {
		t.Fatalf("changed_at = %v, want %v", s.ChangedAt, t0.Add(3*time.Minute))
	}
	sensor, err := stores.Registry.GetSensor(ctx, "reg1")
	if err != nil {
		t.Fatal(err)
	}
	if sensor.State == nil || sensor.State.Data != 1 {
		t.Fatalf("GetSensor state = %+v, want data 1", sensor.State)
	}
}
