package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// streamTicketKey is where a stream ticket lives: under the SHA-256 of the
// ticket, so that reading Redis does not hand out usable tickets.
func (r *Redis) streamTicketKey(ticket string) string {
	sum := sha256.Sum256([]byte(ticket))
	return r.key("stream-ticket:" + hex.EncodeToString(sum[:]))
}

// CreateStreamTicket stores a single-use ticket that opens memberID's stream
// until ttl has passed.
func (r *Redis) CreateStreamTicket(ctx context.Context, ticket, memberID string, ttl time.Duration) error {
	ok, err := r.client.SetNX(ctx, r.streamTicketKey(ticket), memberID, ttl).Result()
	if err != nil {
		return fmt.Errorf("storing a stream ticket: %w", err)
	}
	if !ok {
		return fmt.Errorf("storing a stream ticket: %w", ErrConflict)
	}
	return nil
}

// TakeStreamTicket returns the member a ticket opens the stream of and forgets
// the ticket in the same step (GETDEL), so that it opens one stream at most. It
// returns ErrNotFound for a ticket that is unknown, expired or already used.
func (r *Redis) TakeStreamTicket(ctx context.Context, ticket string) (string, error) {
	member, err := r.client.GetDel(ctx, r.streamTicketKey(ticket)).Result()
	if errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("taking a stream ticket: %w", ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("taking a stream ticket: %w", err)
	}
	return member, nil
}
