package storagetest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// WaitBlockedBy waits until a session waits for a lock that the backend
// blocker holds (pg_blocking_pids): the way a test makes two statements
// interleave at a lock, by Postgres's word rather than a sleep. It asks on a
// connection of its own made from cfg (the pool's may all be the waiter's),
// and fails the test, naming what, when finished says the waiting side ended
// first.
func WaitBlockedBy(ctx context.Context, t testing.TB, cfg *pgx.ConnConfig, blocker int, what string, finished func() bool) {
	t.Helper()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("waiting until %s: %v", what, err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	for waiting := false; !waiting; {
		if finished() {
			t.Fatalf("waiting until %s: it finished without waiting", what)
		}
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE $1::int = ANY (pg_blocking_pids(pid)))`, blocker).Scan(&waiting); err != nil {
			t.Fatalf("waiting until %s: %v", what, err)
		}
	}
}
