package storage

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ClickHouse holds the history analysts query: readings, events and delivery
// attempts. It speaks the native protocol, the only one that works with ClickHouse
// 18.16, and names its columns on every INSERT for the same reason.
type ClickHouse struct {
	conn driver.Conn
}

// OpenClickHouse connects to url (clickhouse://host:9000/database) and checks that
// the server answers.
func OpenClickHouse(ctx context.Context, url string) (*ClickHouse, error) {
	opts, err := clickhouse.ParseDSN(url)
	if err != nil {
		return nil, fmt.Errorf("parsing clickhouse URL: %w", err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("opening clickhouse: %w", err)
	}
	if err := conn.Ping(ctx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("connecting to clickhouse at %v: %w", opts.Addr, err)
	}
	return &ClickHouse{conn: conn}, nil
}

// Ping checks that ClickHouse answers.
func (c *ClickHouse) Ping(ctx context.Context) error {
	return c.conn.Ping(ctx)
}

// Close closes the connections.
func (c *ClickHouse) Close() error {
	return c.conn.Close()
}
