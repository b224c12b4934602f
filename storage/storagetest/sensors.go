package storagetest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lockstream/lockstream/registry"
)

// ImportSensors registers many sensors at once (COPY), for fixtures and benchmarks
// of large fleets, then refreshes the table's statistics so the planner, and
// CountSensors's estimate, know its new size. It fails the test on any error, an
// id already taken included.
func (s *Stores) ImportSensors(t testing.TB, sensors []registry.Sensor) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.PostgresURL)
	if err != nil {
		t.Fatalf("connecting to Postgres: %v", err)
	}
	defer conn.Close(ctx)
	now := time.Now().UTC()
	n, err := conn.CopyFrom(ctx, pgx.Identifier{"sensors"}, []string{"id", "address", "heartbeat_timeout", "created_at", "updated_at"},
		pgx.CopyFromSlice(len(sensors), func(i int) ([]any, error) {
			var timeout *time.Duration
			if d := sensors[i].HeartbeatTimeout; d > 0 {
				timeout = &d
			}
			return []any{sensors[i].ID, sensors[i].Address, timeout, now, now}, nil
		}))
	if err != nil {
		t.Fatalf("importing %d sensors: %v", len(sensors), err)
	}
	if n != int64(len(sensors)) {
		t.Fatalf("imported %d of %d sensors", n, len(sensors))
	}
	if _, err := conn.Exec(ctx, `ANALYZE sensors`); err != nil {
		t.Fatalf("analysing sensors after the import: %v", err)
	}
}
