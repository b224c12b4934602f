// Package pgutil is the Postgres plumbing that storage and the boxes holding
// their own statements share (inbox and escalation cannot import storage,
// which composes their statements): errors mapped to the domain's sentinels,
// LISTEN on a connection of its own, and the ids that can be UUIDs.
package pgutil

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockstream/lockstream/domain"
)

// Postgres error codes mapped to the domain's sentinels.
const (
	pgUniqueViolation     = "23505"
	pgForeignKeyViolation = "23503"
)

// MapError turns pgx's errors into the domain's sentinels (no rows →
// ErrNotFound, a unique violation → ErrConflict, a foreign key violation →
// ErrNotFound), keeping the cause.
func MapError(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgUniqueViolation:
			return fmt.Errorf("%w: %s", domain.ErrConflict, pgErr.Detail)
		case pgForeignKeyViolation:
			return fmt.Errorf("%w: %s", domain.ErrNotFound, pgErr.Detail)
		}
	}
	return err
}

// Listen listens on the Postgres notification channel on a connection of its
// own (taken out of pool: a listening connection must never serve queries
// again) and calls payload with every notification's payload, in order, until
// ctx ends (it then returns nil) or the connection fails (it returns the
// error, naming what it waited for). ready is called once the LISTEN is in
// place.
func Listen(ctx context.Context, pool *pgxpool.Pool, channel, what string, ready func(), payload func(string)) error {
	pooled, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("listening for %s: %w", what, err)
	}
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+channel); err != nil {
		return fmt.Errorf("listening for %s: %w", what, err)
	}
	ready()
	for {
		n, err := conn.WaitForNotification(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		payload(n.Payload)
	}
}

// Handle is what a box's store is built over: storage.Postgres, whose pool the
// boxes share (storage imports some of them, so they name it by this).
type Handle interface {
	Pool() *pgxpool.Pool
}

// ValidUUIDs returns the ids that are UUIDs, in order: an id that is not cannot
// name a row, and would make Postgres refuse the whole uuid[] parameter.
func ValidUUIDs(ids []string) []string {
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if uuid.Validate(id) == nil {
			valid = append(valid, id)
		}
	}
	return valid
}
