// Package storage is the plumbing every box shares to reach its stores: the
// Postgres pool, the Redis client and its key prefix, the ClickHouse
// connection, pgx errors mapped to the domain's, batch helpers and month
// partitions. The boxes own their statements and scripts (heartbeat's Lua and
// SQL, the consumer's state, the history's inserts, …); storage still holds
// those not moved to their box yet.
//
// Callers see domain types and the sentinel errors below, never pgx, go-redis or
// clickhouse-go types, and declare the small interface they need in their own package.
package storage

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/lockstream/lockstream/domain"
)

// ErrNotFound is domain.ErrNotFound: the row asked for does not exist.
var ErrNotFound = domain.ErrNotFound

// ErrConflict is domain.ErrConflict: a row with the same identity already exists.
var ErrConflict = domain.ErrConflict

// ErrUnavailable is domain.ErrUnavailable, matched by every UnavailableError.
var ErrUnavailable = domain.ErrUnavailable

// UnavailableError is domain.UnavailableError: a store could not be reached.
type UnavailableError = domain.UnavailableError

// Unreachable is unreachable for the boxes that own their statements: it wraps
// err in an UnavailableError for store when it says the store could not be
// reached, and returns any other error as it is.
func Unreachable(store string, err error) error { return unreachable(store, err) }

// unreachable wraps err in an UnavailableError for store when it says the store
// could not be reached, and returns any other error (a query the store refused)
// as it is.
func unreachable(store string, err error) error {
	var netErr net.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return err // the caller gave up; the store may be fine
	case errors.As(err, &netErr), // dial and read errors, timeouts (context deadlines too)
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, driver.ErrBadConn),
		errors.Is(err, clickhouse.ErrAcquireConnTimeout):
		return &UnavailableError{Store: store, Err: err}
	}
	return err
}

// Platform is a push target's mobile platform (domain.Platform).
type Platform = domain.Platform

// The platforms Swrve pushes to.
const (
	PlatformIOS     = domain.PlatformIOS
	PlatformAndroid = domain.PlatformAndroid
)

// PushTarget is one device of a client that receives push notifications
// (domain.PushTarget).
type PushTarget = domain.PushTarget

// Page asks for at most Limit rows whose key sorts after After ("" for the first page).
type Page struct {
	After string
	Limit int
}
