package heartbeat_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// The Tracker follows the admin API's changes to the registry: a sensor
// created with a timeout is due by that timeout from its registration, a
// PATCHed timeout applies at once, a deleted sensor is forgotten, and a
// sensor that is not registered is the API's ErrNotFound.
func TestTrackerFollowsTheRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d, _ := b.newDaemon(t, nil)
	sweep(t, d) // first start
	pg := b.stores.Postgres
	if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: "slow", Address: "x", HeartbeatTimeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"patched", "deleted"} {
		if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: id, Address: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"slow", "patched", "deleted"} {
		if err := b.tracker.SensorCreated(ctx, id, b.t0); err != nil {
			t.Fatal(err)
		}
	}
	ten := 10 * time.Second
	if _, err := registry.New(pg).UpdateSensor(ctx, "patched", registry.SensorUpdate{HeartbeatTimeout: &ten}); err != nil {
		t.Fatal(err)
	}
	if err := b.tracker.SensorUpdated(ctx, "patched"); err != nil {
		t.Fatal(err)
	}
	if err := b.tracker.SensorDeleted(ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	if err := b.tracker.SensorCreated(ctx, "nobody", b.t0); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("SensorCreated of an unregistered sensor: %v, want ErrNotFound", err)
	}

	b.advance(4) // past the fleet's timeout: none is due
	sweep(t, d)
	if lost := ofType(b.published(t), event.ConnectionLost); len(lost) != 0 {
		t.Fatalf("losses by t0+4 = %v, want none", lost)
	}
	b.advance(7) // slow was due at t0+6
	sweep(t, d)
	if lost := ofType(b.published(t), event.ConnectionLost); len(lost) != 1 || lost["slow"] != 1 {
		t.Fatalf("losses by t0+7 = %v, want slow's", lost)
	}
	b.advance(13) // patched was due at t0+11 (and its shift's rounding)
	sweep(t, d)
	if lost := ofType(b.published(t), event.ConnectionLost); len(lost) != 2 || lost["patched"] != 1 {
		t.Fatalf("losses by t0+13 = %v, want slow's and patched's; deleted is forgotten", lost)
	}
}
