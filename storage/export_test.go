package storage

import (
	"context"
	"fmt"

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

// EventSeverity grades an event of type typ with data as the inbox's SQL does.
func EventSeverity(ctx context.Context, p *Postgres, typ string, data *int) (string, error) {
	var s string
	err := p.pool.QueryRow(ctx, `SELECT `+fmt.Sprintf(eventSeverity, "x")+`
		FROM (VALUES ($1::text, $2::int2)) AS x (type, data)`, typ, outboxInt16Ptr(data)).Scan(&s)
	return s, err
}
