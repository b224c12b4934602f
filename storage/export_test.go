package storage

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// AddRedisHook lets tests watch the commands a Redis store sends.
func AddRedisHook(r *Redis, h redis.Hook) { r.client.AddHook(h) }

// DropLostIndex deletes the lost index and its built marker, as a deployment that
// kept losses from before the index has them.
func DropLostIndex(r *Redis) error {
	return r.client.Del(context.Background(), r.key(hbLostIDs), r.key(hbLostIDsBuilt)).Err()
}

// ClaimDeliveriesSQL is ClaimDeliveries' statement, for EXPLAIN.
const ClaimDeliveriesSQL = claimDeliveriesSQL
