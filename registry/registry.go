// Package registry owns what lockstream knows of its fleet and its customers:
// sensors, clients, the links between them (client_sensors), clients' members
// and their tokens, and clients' webhook signing secrets, sealed at rest with
// secretbox. It holds their types and every statement that writes them; the
// boxes that only read them in their own statements (the fan-out's, the
// consumer's lookups) keep those. Like storage, it is a data box: it imports
// storage's plumbing (the pool, Page, pgutil's error mapping), the inbox's
// backfill of a new member, and no daemon.
package registry

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/registry/secretbox"
	"github.com/lockstream/lockstream/storage"
)

// Store reads and writes the registry in Postgres. It is safe for concurrent
// use.
type Store struct {
	pool *pgxpool.Pool
	// box seals client signing secrets; nil when the store was opened without
	// storage.WithSecretBox.
	box *secretbox.Box
}

// New returns the registry on p's pool, sealing secrets with p's box
// (storage.WithSecretBox).
func New(p *storage.Postgres) *Store {
	return &Store{pool: p.Pool(), box: p.SecretBox()}
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

// Client is a system or person that is notified about the sensors it is linked to.
type Client struct {
	ID         string
	Name       string
	WebhookURL string
	// Email is empty when the client gets no email.
	Email       string
	PushTargets []domain.PushTarget
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
	PushTargets *[]domain.PushTarget
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
