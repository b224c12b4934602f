package domain

import "errors"

// ErrNotFound is returned when the row asked for does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when a row with the same identity already exists.
var ErrConflict = errors.New("already exists")

// ErrUnavailable is matched (errors.Is) by every UnavailableError: a store could
// not be reached, as opposed to one that answered with an error. Callers may
// answer "try again later" to it.
var ErrUnavailable = errors.New("store unavailable")

// UnavailableError reports that a store could not be reached (connection refused
// or reset, a timeout, no free connection); Err is the cause.
type UnavailableError struct {
	// Store names the store: "clickhouse", "postgres", "redis".
	Store string
	Err   error
}

func (e *UnavailableError) Error() string { return e.Store + " unreachable: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }
