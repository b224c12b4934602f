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
	"time"

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

// Sensor is a registered door-lock sensor, with its last known state when it has
// reported at least once.
type Sensor struct {
	ID      string
	Address string
	// HeartbeatTimeout overrides the fleet-wide timeout when non-zero.
	HeartbeatTimeout time.Duration
	// OpenAlertAfter, when non-zero, makes an unlock that lasts longer than it a
	// sensor_open_too_long event.
	OpenAlertAfter time.Duration
	// Site names the sensor's site; empty when it has none.
	Site      string
	CreatedAt time.Time
	UpdatedAt time.Time
	// State is nil until the sensor's first reading has been consumed.
	State *SensorState
}

// SensorState is the last known reading of a sensor.
type SensorState struct {
	SensorID  string
	Data      int
	ChangedAt time.Time
}

// SensorUpdate holds the fields of a sensor that PATCH may change; nil leaves a field
// as it is.
type SensorUpdate struct {
	Address          *string
	HeartbeatTimeout *time.Duration
	// OpenAlertAfter, when set, replaces the sensor's; zero turns the alert off.
	OpenAlertAfter *time.Duration
	// Site, when set, replaces the sensor's site; "" removes it.
	Site *string
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

// Client is a system or person that is notified about the sensors it is linked to.
type Client struct {
	ID         string
	Name       string
	WebhookURL string
	// Email is empty when the client gets no email.
	Email       string
	PushTargets []PushTarget
	// Secret signs the client's webhooks. It is only filled in where the secret may be
	// shown: on creation and rotation, and for the notifier.
	Secret string
	// EventTypes are the event types the client is notified of, on every
	// channel; nil means every type, those added later included.
	EventTypes []string
	// RateLimit caps the client's webhook deliveries per second, across every
	// retrier; 0 means no cap.
	RateLimit int
	// EndpointDisabledAt is when the webhook endpoint was disabled for failing
	// (its deliveries are PAUSED); zero while enabled.
	EndpointDisabledAt time.Time
	// WebhookFailingSince is the first failed webhook attempt since the last
	// successful one, and WebhookFailures the failures since; zero while healthy.
	WebhookFailingSince time.Time
	WebhookFailures     int
	// Report says whether the client gets the weekly report by email.
	Report    ReportSettings
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ReportSettings are a client's weekly report settings.
type ReportSettings struct {
	// Weekly mails the report of the last week every Monday 08:00 in
	// Timezone to the client's email. Defaults to false.
	Weekly bool
	// Timezone is an IANA time zone name: the weeks and the send time are
	// local to it. Defaults to UTC.
	Timezone string
}

// ClientUpdate holds the fields of a client that PATCH may change; nil leaves a field
// as it is. An empty Email removes the address; a non-nil PushTargets replaces them all.
type ClientUpdate struct {
	Name        *string
	WebhookURL  *string
	Email       *string
	PushTargets *[]PushTarget
	// EventTypes, when not nil, replaces the subscriptions; pointing to a nil
	// slice subscribes to every type.
	EventTypes *[]string
	// RateLimit, when not nil, replaces the webhook rate limit; 0 removes it.
	RateLimit *int
	// ReportWeekly and ReportTimezone, when not nil, replace the weekly
	// report's settings (the caller checks the zone's name).
	ReportWeekly   *bool
	ReportTimezone *string
}

// Page asks for at most Limit rows whose key sorts after After ("" for the first page).
type Page struct {
	After string
	Limit int
}
