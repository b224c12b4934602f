package storagetest

import (
	"context"
	"crypto/sha256"
	"testing"

	"github.com/google/uuid"

	"github.com/lockstream/lockstream/registry"
)

// Fleet is a test's fresh stores with sensors registered, and the clients and
// members the outbox's, the fan-out's, the inbox's and the registry's tests add
// to them: the set-up those tests share.
type Fleet struct {
	*Stores
	// Ctx is the context of the fleet's writes.
	Ctx context.Context
}

// NewFleet returns a Fleet on fresh stores with one sensor per id, each at the
// address "addr of <id>".
func NewFleet(t testing.TB, sensors ...string) *Fleet {
	t.Helper()
	f := &Fleet{Stores: New(t), Ctx: context.Background()}
	for _, id := range sensors {
		if _, err := f.Registry.CreateSensor(f.Ctx, registry.Sensor{ID: id, Address: "addr of " + id}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// Client creates c linked to the sensors; an empty webhook URL or secret gets
// a valid one.
func (f *Fleet) Client(t testing.TB, c registry.Client, sensors ...string) registry.Client {
	t.Helper()
	if c.WebhookURL == "" {
		c.WebhookURL = "https://example.com/hook"
	}
	if c.Secret == "" {
		c.Secret = "whsec_c2VjcmV0"
	}
	created, err := f.Registry.CreateClient(f.Ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sensors {
		if err := f.Registry.LinkSensor(f.Ctx, created.ID, s); err != nil {
			t.Fatal(err)
		}
	}
	return created
}

// Member creates a member of the client, in UTC with the default preferences,
// with a token of its own.
func (f *Fleet) Member(t testing.TB, clientID, name string, backfill registry.Backfill) registry.Member {
	t.Helper()
	hash := sha256.Sum256([]byte("lsm_" + uuid.NewString()))
	m, _, err := f.Registry.CreateMember(f.Ctx, registry.Member{ClientID: clientID, Name: name, Timezone: "UTC",
		Preferences: registry.DefaultMemberPreferences()}, hash[:], backfill)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
