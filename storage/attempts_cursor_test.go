package storage_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// The copy to ClickHouse follows a cursor over an insert-only log, and a row
// whose transaction took its id before a copied row's but committed after the
// copy is still copied, once: a cursor on ids alone would skip it. Batches are
// limited (two rows here), and the rows are never updated.
func TestCopyDeliveryAttemptsFollowsCommitsNotIds(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx := context.Background()
	pg := stores.Postgres
	insert := func(tx pgx.Tx, attempt int) {
		t.Helper()
		if _, err := tx.Exec(ctx, `
			INSERT INTO delivery_attempts (delivery_id, channel, attempt, status, recorded, at)
			VALUES ($1, 'webhook', $2, 'SENT', true, $3)`, uuid.New(), attempt, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	var got []int
	copyInto := func(_ context.Context, batch []storage.DeliveryAttempt) error {
		for _, a := range batch {
			got = append(got, a.Attempt)
		}
		return stores.ClickHouse.InsertDeliveryAttempts(ctx, batch)
	}
	copyAll := func() {
		t.Helper()
		for {
			n, err := pg.CopyDeliveryAttempts(ctx, 2, copyInto)
			if err != nil {
				t.Fatal(err)
			}
			if n < 2 {
				return
			}
		}
	}

	// Attempt 1 takes the lowest id and stays uncommitted while 2, 3 and 4
	// commit and are copied.
	slow, err := pg.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slow.Rollback(ctx) }()
	insert(slow, 1)
	for attempt := 2; attempt <= 4; attempt++ {
		if err := pgx.BeginFunc(ctx, pg.Pool(), func(tx pgx.Tx) error { insert(tx, attempt); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	copyAll()
	if want := []int{2, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("first copies: %v, want %v", got, want)
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	copyAll()
	copyAll()
	if want := []int{2, 3, 4, 1}; !slices.Equal(got, want) {
		t.Fatalf("copies after the slow commit: %v, want %v (attempt 1 once, late)", got, want)
	}
	var cols int
	if err := pg.Pool().QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_name = 'delivery_attempts' AND column_name = 'copied_at' AND table_schema = current_schema()`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if cols != 0 {
		t.Errorf("delivery_attempts still has copied_at: the log is to be insert-only")
	}
}
