package storagetest

import (
	"context"
	"fmt"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// The containers below are the fallback for machines with a Docker engine and no
// local services. They live as long as the test binary; testcontainers' reaper
// removes them afterwards.

func startPostgresContainer(ctx context.Context) (string, error) {
	c, err := testcontainers.Run(ctx, "postgres:16-alpine",
		testcontainers.WithEnv(map[string]string{
			"POSTGRES_USER": "lockstream", "POSTGRES_PASSWORD": "lockstream", "POSTGRES_DB": "lockstream",
		}),
		testcontainers.WithExposedPorts("5432/tcp"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").WithOccurrence(2)),
	)
	if err != nil {
		return "", fmt.Errorf("starting postgres container: %w", err)
	}
	endpoint, err := c.PortEndpoint(ctx, "5432/tcp", "")
	if err != nil {
		return "", fmt.Errorf("postgres container endpoint: %w", err)
	}
	return "postgres://lockstream:lockstream@" + endpoint + "/lockstream?sslmode=disable", nil
}

func startRedisContainer(ctx context.Context) (string, error) {
	c, err := testcontainers.Run(ctx, "redis:7-alpine",
		testcontainers.WithExposedPorts("6379/tcp"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("6379/tcp")),
	)
	if err != nil {
		return "", fmt.Errorf("starting redis container: %w", err)
	}
	endpoint, err := c.PortEndpoint(ctx, "6379/tcp", "redis")
	if err != nil {
		return "", fmt.Errorf("redis container endpoint: %w", err)
	}
	return endpoint + "/0", nil
}

func startClickHouseContainer(ctx context.Context) (string, error) {
	c, err := testcontainers.Run(ctx, "clickhouse/clickhouse-server:24.8",
		testcontainers.WithEnv(map[string]string{"CLICKHOUSE_SKIP_USER_SETUP": "1"}),
		testcontainers.WithExposedPorts("9000/tcp"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("9000/tcp")),
	)
	if err != nil {
		return "", fmt.Errorf("starting clickhouse container: %w", err)
	}
	endpoint, err := c.PortEndpoint(ctx, "9000/tcp", "clickhouse")
	if err != nil {
		return "", fmt.Errorf("clickhouse container endpoint: %w", err)
	}
	return endpoint + "/default", nil
}
