package live

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/internal/pgutil"
)

// PostgresStore is the inbox's store with the feed the hub listens to: the
// inbox box states what its NOTIFY says (inbox.Channel, inbox.ParseNews), and
// the hub, its one listener, holds the connection that hears it — so the
// inbox stays a library the daemons that write it can import.
type PostgresStore struct {
	*inbox.PostgresStore
	pool *pgxpool.Pool
}

// NewPostgresStore returns the inbox's store over p's pool (p is
// storage.Postgres), with its feed.
func NewPostgresStore(p pgutil.Handle) *PostgresStore {
	return &PostgresStore{PostgresStore: inbox.NewPostgresStore(p), pool: p.Pool()}
}

// ListenInbox listens on inbox.Channel on a connection of its own (taken out
// of the pool) and calls notice with every payload, parsed, in order, until
// ctx ends (it then returns nil) or the connection fails (it returns the
// error; call it again). ready is called once the LISTEN is in place: a caller
// that missed notifications while not listening must catch up after it.
func (s *PostgresStore) ListenInbox(ctx context.Context, ready func(), notice func(inbox.News)) error {
	return pgutil.Listen(ctx, s.pool, inbox.Channel, "inbox messages", ready, func(payload string) {
		notice(inbox.ParseNews(payload))
	})
}
