package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// storeClickHouse names ClickHouse in an UnavailableError.
const storeClickHouse = "clickhouse"

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

// DefaultLazyDialTimeout bounds connecting to ClickHouse, handshake included, for
// OpenClickHouseLazy when the URL sets no dial_timeout. clickhouse-go's handshake
// does not heed the context, so this, not a request's deadline, is how long a
// ClickHouse that accepts connections but never answers holds a request.
const DefaultLazyDialTimeout = 5 * time.Second

// OpenClickHouseLazy is OpenClickHouse without the check: the pool connects on
// first use, so a process that can serve without ClickHouse (the API) starts
// while it is down. Until it is back, queries fail with an UnavailableError
// (errors.Is ErrUnavailable) and Ping fails; the pool connects again by itself.
// Connecting gives up after the URL's dial_timeout, DefaultLazyDialTimeout if it
// sets none.
func OpenClickHouseLazy(url string) (*ClickHouse, error) {
	opts, err := clickhouse.ParseDSN(url)
	if err != nil {
		return nil, fmt.Errorf("parsing clickhouse URL: %w", err)
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = DefaultLazyDialTimeout
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("opening clickhouse: %w", err)
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

// Conn returns the ClickHouse connection, for the boxes that own their
// statements (history, analytics, heartbeat's rebuild).
func (c *ClickHouse) Conn() driver.Conn { return c.conn }
