package storage_test

import (
	"crypto/sha256"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/registry"
)

// member creates a member of the client with a token of its own.
func (f *outboxFixture) member(t *testing.T, clientID, name string, backfill registry.Backfill) registry.Member {
	t.Helper()
	hash := sha256.Sum256([]byte("lsm_" + uuid.NewString()))
	m, _, err := f.reg.CreateMember(f.ctx, registry.Member{ClientID: clientID, Name: name, Timezone: "UTC",
		Preferences: registry.DefaultMemberPreferences()}, hash[:], backfill)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// inbox returns every message of the member, seen and unseen, in seq order.
func (f *outboxFixture) inbox(t *testing.T, memberID string) []inbox.Message {
	t.Helper()
	_, ms, err := inbox.NewPostgresStore(f.pg).ListInbox(f.ctx, inbox.Query{MemberID: memberID, IncludeSeen: true,
		Sort: inbox.SortTimestamp, Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ms, func(a, b inbox.Message) int { return int(a.Seq - b.Seq) })
	return ms
}
