// Package analytics answers the questions analysts ask of the history in
// ClickHouse: a sensor's raw readings and events a page at a time, and, for a
// scope (a sensor, a site, a client's sensors or the fleet), figures in
// buckets aligned in a time zone, rankings, exports and the weekly report.
//
// It owns every ClickHouse read made for analysts, and the rollups' queries:
// the rollups themselves (events_hourly, readings_hourly) are filled by
// materialized views on every insert into the raw tables (see
// migrations/clickhouse), so the history writer knows nothing of them.
//
// Every figure of time in a state is linear in the changes (see figures.go),
// which is what lets per-(sensor, hour) sums answer any bucket made of whole
// hours exactly, and raw rows answer the rest.
package analytics

import (
	"context"
	"errors"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// store names ClickHouse in an UnavailableError.
const store = "clickhouse"

// Store reads the history for analysts. Create it with New.
type Store struct {
	conn      driver.Conn
	scopes    Scopes
	outages   Outages
	incidents Incidents
	now       func() time.Time
	// source forces raw rows or rollups (tests, benchmarks); SourceAuto by default.
	source Source
	// sealMargin: see WithSealMargin.
	sealMargin time.Duration
}

// Source says where aggregates come from.
type Source int

// The sources of aggregates.
const (
	// SourceAuto uses the rollups for whole hours and raw rows for the rest.
	SourceAuto Source = iota
	// SourceRaw reads raw rows only.
	SourceRaw
)

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock that says when "now" is (a loss still open is
// counted to now when the range reaches past it). Defaults to time.Now.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithSource forces the source of aggregates (tests compare both).
func WithSource(src Source) Option { return func(s *Store) { s.source = src } }

// WithSealMargin sets how long before a seal's start an insert must have
// touched an hour for SealRollups to count it as seen (an insert's views run
// one after the other, and may end after the seal began). Defaults to 5
// minutes; a test whose inserts have all returned may use 0.
func WithSealMargin(d time.Duration) Option { return func(s *Store) { s.sealMargin = d } }

// New returns a Store reading ClickHouse through conn and resolving scopes to
// their sensors through scopes (nil: only the raw lists work).
func New(conn driver.Conn, scopes Scopes, opts ...Option) *Store {
	s := &Store{conn: conn, scopes: scopes, now: time.Now, sealMargin: DefaultSealMargin}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Ping checks that ClickHouse answers.
func (s *Store) Ping(ctx context.Context) error { return s.conn.Ping(ctx) }

// ErrBadQuery is wrapped by errors about the query itself (a range that makes
// too many buckets, from not before to): the API answers them with a 400.
var ErrBadQuery = errors.New("bad query")
