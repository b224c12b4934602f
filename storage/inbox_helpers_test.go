package storage_test

import (
	"slices"
	"testing"

	"github.com/lockstream/lockstream/inbox"
)

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
