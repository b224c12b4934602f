package storage

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Redis holds heartbeat bookkeeping: nothing in it that cannot be rebuilt from
// Postgres or ClickHouse. Every key it writes starts with its prefix, so several
// deployments (or tests) can share one server.
type Redis struct {
	client *redis.Client
	prefix string
}

// OpenRedis connects to url (redis://host:port/db) and checks that the server answers.
// Every key is namespaced under prefix (for instance "lockstream:").
func OpenRedis(ctx context.Context, url, prefix string) (*Redis, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("parsing redis URL: %w", err)
	}
	client := redis.NewClient(opts)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("connecting to redis at %s: %w", opts.Addr, err)
	}
	return &Redis{client: client, prefix: prefix}, nil
}

// Ping checks that Redis answers.
func (r *Redis) Ping(ctx context.Context) error {
	return r.client.Ping(ctx).Err()
}

// Close closes the connection pool.
func (r *Redis) Close() error {
	return r.client.Close()
}

// key returns name inside this store's namespace.
func (r *Redis) key(name string) string {
	return r.prefix + name
}

// Client returns the Redis client, for the boxes that own their scripts
// (heartbeat, inbox, console, the rate limits).
func (r *Redis) Client() *redis.Client { return r.client }

// Key returns name inside this store's namespace (its prefix first).
func (r *Redis) Key(name string) string { return r.key(name) }
