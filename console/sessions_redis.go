package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockstream/lockstream/storage"
)

// RedisStore keeps the console's sessions in Redis.
type RedisStore struct {
	client *redis.Client
	key    func(name string) string
}

// NewRedisStore returns the console's session store on r's client, in r's
// key namespace.
func NewRedisStore(r *storage.Redis) *RedisStore {
	return &RedisStore{client: r.Client(), key: r.Key}
}

// StoredSession is a signed-in user of the operator console, stored under the hash
// of its cookie so that the store never holds a usable session id.
type StoredSession struct {
	// Role is what the session may see: "admin" (everything); "member" (its own
	// client's inbox) comes with members.
	Role string `json:"role"`
	// Subject is the member id of a member session; empty for the admin.
	Subject string `json:"subject,omitempty"`
	// Credential fingerprints the token that signed in, so a session ends when that
	// token is rotated.
	Credential string `json:"credential"`
	// CSRF is the token every form of the session carries.
	CSRF      string    `json:"csrf"`
	CreatedAt time.Time `json:"created_at"`
}

func (r *RedisStore) sessionStoreKey(id string) string { return r.key("console:session:" + id) }

// CreateConsoleSession stores a session for ttl; an id already taken is storage.ErrConflict.
func (r *RedisStore) CreateConsoleSession(ctx context.Context, id string, s StoredSession, ttl time.Duration) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encoding console session: %w", err)
	}
	ok, err := r.client.SetNX(ctx, r.sessionStoreKey(id), b, ttl).Result()
	if err != nil {
		return fmt.Errorf("storing console session: %w", err)
	}
	if !ok {
		return fmt.Errorf("storing console session: %w", storage.ErrConflict)
	}
	return nil
}

// ConsoleSession returns the session stored under id, or storage.ErrNotFound once it
// expired or was deleted.
func (r *RedisStore) ConsoleSession(ctx context.Context, id string) (StoredSession, error) {
	b, err := r.client.Get(ctx, r.sessionStoreKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return StoredSession{}, fmt.Errorf("console session: %w", storage.ErrNotFound)
	}
	if err != nil {
		return StoredSession{}, fmt.Errorf("reading console session: %w", err)
	}
	var s StoredSession
	if err := json.Unmarshal(b, &s); err != nil {
		return StoredSession{}, fmt.Errorf("decoding console session: %w", err)
	}
	return s, nil
}

// DeleteConsoleSession ends a session; ending one that does not exist is no error.
func (r *RedisStore) DeleteConsoleSession(ctx context.Context, id string) error {
	if err := r.client.Del(ctx, r.sessionStoreKey(id)).Err(); err != nil {
		return fmt.Errorf("deleting console session: %w", err)
	}
	return nil
}
