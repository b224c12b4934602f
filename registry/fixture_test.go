package registry_test

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// fixture is a test's registry with the outbox beside it on the same
// Postgres: what the registry deletes or seals is checked where the outbox
// and the inboxes read it.
type fixture struct {
	pg  *storage.Postgres
	reg *registry.Store
	ctx context.Context
}

// newFixture returns a fixture on fresh stores with the sensors registered.
func newFixture(t *testing.T, sensors ...string) *fixture {
	t.Helper()
	stores := storagetest.New(t)
	f := &fixture{pg: stores.Postgres, reg: stores.Registry, ctx: context.Background()}
	for _, id := range sensors {
		if _, err := f.reg.CreateSensor(f.ctx, registry.Sensor{ID: id, Address: "addr of " + id}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// client creates a client linked to the sensors.
func (f *fixture) client(t *testing.T, c registry.Client, sensors ...string) registry.Client {
	t.Helper()
	if c.WebhookURL == "" {
		c.WebhookURL = "https://example.com/hook"
	}
	if c.Secret == "" {
		c.Secret = "whsec_c2VjcmV0"
	}
	created, err := f.reg.CreateClient(f.ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sensors {
		if err := f.reg.LinkSensor(f.ctx, created.ID, s); err != nil {
			t.Fatal(err)
		}
	}
	return created
}

// member creates a member of the client with a token of its own.
func (f *fixture) member(t *testing.T, clientID, name string, backfill registry.Backfill) registry.Member {
	t.Helper()
	hash := sha256.Sum256([]byte("lsm_" + uuid.NewString()))
	m, _, err := f.reg.CreateMember(f.ctx, registry.Member{ClientID: clientID, Name: name, Timezone: "UTC",
		Preferences: registry.DefaultMemberPreferences()}, hash[:], backfill)
	if err != nil {
		t.Fatal(err)
	}
	return m
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
