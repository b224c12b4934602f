package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// fixture is a test's registry with the outbox beside it on the same
// Postgres: what the registry deletes or seals is checked where the outbox
// and the inboxes read it.
type fixture struct {
	*storagetest.Fleet
	pg  *storage.Postgres
	reg *registry.Store
	ctx context.Context
}

// newFixture returns a fixture on fresh stores with the sensors registered.
func newFixture(t *testing.T, sensors ...string) *fixture {
	t.Helper()
	fleet := storagetest.NewFleet(t, sensors...)
	return &fixture{Fleet: fleet, pg: fleet.Postgres, reg: fleet.Registry, ctx: fleet.Ctx}
}

// create writes the events' notifications and deliveries.
func (f *fixture) create(t *testing.T, events ...storage.NotificationInput) fanout.NotificationsCreated {
	t.Helper()
	created, err := fanout.NewPostgresStore(f.pg).CreateNotifications(f.ctx, events)
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// deliveries returns every delivery of the client, in creation order.
func (f *fixture) deliveries(t *testing.T, clientID string) []storage.Delivery {
	t.Helper()
	ds, err := f.pg.ListClientDeliveries(f.ctx, clientID, storage.DeliveryFilter{}, storage.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

var outboxT0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func stateChanged(id, sensor string, data int, at time.Time) storage.NotificationInput {
	prev := 1 - data
	return storage.NotificationInput{EventID: id, Type: "state_changed", SensorID: sensor, Data: &data, Previous: &prev, At: at}
}
