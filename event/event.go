// Package event defines what lockstream says about a sensor: a state change, a lost
// connection or a restored one. Events travel as JSON on lockstream.events, keyed by
// sensor id, and every step downstream is idempotent on their ids.
package event

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Type names what happened to a sensor.
type Type string

// The event types of DESIGN.md.
const (
	StateChanged       Type = "state_changed"
	ConnectionLost     Type = "connection_lost"
	ConnectionRestored Type = "connection_restored"
	// SensorOpenTooLong says an unlocked sensor stayed unlocked for longer than
	// its open_alert_after: once per opening.
	SensorOpenTooLong Type = "sensor_open_too_long"
	// SiteOutage says enough of a site's sensors were lost at once; it lists
	// them and is delivered instead of their connection_lost notifications.
	SiteOutage Type = "site_outage"
	// SiteRestored ends a site_outage: more than half of the site is back.
	SiteRestored Type = "site_restored"
	// MaintenanceEnded ends a maintenance window of a sensor or a site; it
	// lists the sensors that went silent inside it, whose losses it is
	// delivered instead of.
	MaintenanceEnded Type = "maintenance_ended"
	// SensorUnstable says a sensor changes too often (flapping): its
	// state_changed notifications are held until it is stable again.
	SensorUnstable Type = "sensor_unstable"
	// SensorStable ends a SensorUnstable: the sensor was quiet for a window;
	// data is its final state.
	SensorStable Type = "sensor_stable"
)

// The operational notices of a client's webhook endpoint (DESIGN.md
// "Operational notices"): on the client's feed, by email and in its members'
// inboxes, never by webhook, so they are no subscribable event types.
const (
	// EndpointFailing: LOCKSTREAM_ENDPOINT_FAILING_AFTER consecutive attempts
	// failed; once per failing streak.
	EndpointFailing Type = "endpoint_failing"
	// EndpointDisabled: the endpoint was disabled after failing too long.
	EndpointDisabled Type = "endpoint_disabled"
	// EndpointRecovered: an attempt succeeded after a notice (failing, or
	// disabled and enabled since).
	EndpointRecovered Type = "endpoint_recovered"
)

// The incident events (DESIGN.md "Incidents"): subscribable like the sensor
// events, they go to the client's webhook and feed (not by email or push, nor
// to the members' inboxes, which hear of incidents by reminders). Their event
// id is IncidentEventID's; Data is 0 on the incident_opened of a critical
// incident, nil otherwise.
const (
	IncidentOpened       Type = "incident_opened"
	IncidentAcknowledged Type = "incident_acknowledged"
	IncidentResolved     Type = "incident_resolved"
)

// Incidents returns the incident event types (not in Types: no sensor event
// carries them, and they go by webhook only).
func Incidents() []Type { return []Type{IncidentOpened, IncidentAcknowledged, IncidentResolved} }

// Subscribable returns the types a client may subscribe to (PATCH
// /v1/clients/{id} event_types): the sensor events and the incident events.
func Subscribable() []Type { return append(Types(), Incidents()...) }

// incidentPrefix starts an incident event's id.
const incidentPrefix = "incident:"

// IncidentEventID is the event id of the incident event t of incident id:
// "incident:<id>:<opened|acknowledged|resolved>" (one of each per incident).
func IncidentEventID(id string, t Type) string {
	return incidentPrefix + id + ":" + strings.TrimPrefix(string(t), "incident_")
}

// IncidentOf returns the incident an incident event's id names; "" for
// another event's id.
func IncidentOf(eventID string) string {
	rest, ok := strings.CutPrefix(eventID, incidentPrefix)
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, ":")
	return id
}

// Types returns every known event type: the one list that clients' subscriptions
// (PATCH /v1/clients/{id} event_types) are checked against. A new type is added
// here and as a constant above.
func Types() []Type {
	return []Type{StateChanged, ConnectionLost, ConnectionRestored, SensorOpenTooLong, SiteOutage, SiteRestored, MaintenanceEnded,
		SensorUnstable, SensorStable}
}

// Notices returns the operational notice types (not in Types: no client
// subscribes to them, and no webhook carries them).
func Notices() []Type { return []Type{EndpointFailing, EndpointDisabled, EndpointRecovered} }

// SilentSeconds is how long a restored sensor was silent, in whole seconds:
// from lostSince (its last reading before the loss) to at; 0 when lostSince
// is nil.
func SilentSeconds(lostSince *time.Time, at time.Time) int64 {
	if lostSince == nil {
		return 0
	}
	return int64(max(at.Sub(*lostSince), 0) / time.Second)
}

// Outage says how long a sensor was silent for people: "45 s", "12 min",
// "2 h 14 min", "3 d 4 h" (rounded down to its two largest units).
func Outage(seconds int64) string {
	d, h, m, s := seconds/86400, seconds%86400/3600, seconds%3600/60, seconds%60
	switch {
	case d > 0 && h > 0:
		return fmt.Sprintf("%d d %d h", d, h)
	case d > 0:
		return fmt.Sprintf("%d d", d)
	case h > 0 && m > 0:
		return fmt.Sprintf("%d h %d min", h, m)
	case h > 0:
		return fmt.Sprintf("%d h", h)
	case m > 0:
		return fmt.Sprintf("%d min", m)
	}
	return fmt.Sprintf("%d s", s)
}

// Valid reports whether t is one of the known types.
func (t Type) Valid() bool {
	return slices.Contains(Types(), t)
}

// Severity grades an event for the people it reaches (DESIGN.md "Fleet
// judgement"); escalation waits less for a critical one.
type Severity string

// The severities, most urgent first.
const (
	Critical Severity = "critical"
	Warning  Severity = "warning"
	Info     Severity = "info"
)

// Unlocked is the state (data) of an unlocked sensor; 1 is locked.
const Unlocked = 0

// SeverityOf grades an event of type t whose data (the new or last known
// state) is data: a sensor lost while unlocked, or unlocked for longer than
// its open_alert_after, is critical; another loss a warning; anything else
// info. It is the one definition: the inbox's SQL (storage) agrees with it,
// which a storage test checks.
func SeverityOf(t Type, data *int) Severity {
	switch t {
	case SensorOpenTooLong:
		return Critical
	case ConnectionLost:
		if data != nil && *data == Unlocked {
			return Critical
		}
		return Warning
	case SiteOutage, EndpointFailing, EndpointDisabled:
		return Warning
	case IncidentOpened:
		if data != nil && *data == Unlocked {
			return Critical
		}
		return Warning
	}
	return Info
}

// Event is one thing that happened to a sensor.
type Event struct {
	// ID is deterministic (see the ID functions below), so a replay produces the same
	// id and downstream steps drop the duplicate.
	ID       string `json:"id"`
	Type     Type   `json:"type"`
	SensorID string `json:"sensor_id"`
	// Data is the new state for state_changed, and the last known state (if any) for
	// the connection events.
	Data *int `json:"data"`
	// Previous is the state before a state_changed; nil for a sensor's first reading.
	Previous *int `json:"previous"`
	// At is when it happened, on server receive time.
	At time.Time `json:"at"`
	// SilentFor is how long a restored sensor was silent, in whole seconds:
	// from LostSince to At.
	SilentFor int64 `json:"silent_seconds,omitempty"`
	// LostSince, on a connection_restored, is the sensor's last reading before
	// the loss it ends (DESIGN.md "Incidents": every channel says how long the
	// sensor was lost).
	LostSince *time.Time `json:"lost_since,omitempty"`
	// Severity grades the event (SeverityOf its type and data). Encode sets it
	// when empty, and Decode for events written before it existed.
	Severity Severity `json:"severity,omitempty"`
	// Site names the site of a site event; Sensors lists the sensors it is
	// about (a site_outage's lost ones, a site_restored's outage's). SensorID is
	// then the first of them, which orders the event with that sensor's.
	Site    string   `json:"site,omitempty"`
	Sensors []string `json:"sensors,omitempty"`
	// CoveredBy, on a connection_lost, is the id of the event delivered
	// instead of it (a site_outage, or the maintenance_ended of the window it
	// fell in): history keeps the loss, the fan-out notifies nobody of it.
	CoveredBy string `json:"covered_by,omitempty"`
	// Held, on a state_changed, says its sensor is unstable: history keeps the
	// change, the fan-out notifies nobody of it, and the sensor_stable that
	// ends the streak carries the final state.
	Held bool `json:"held,omitempty"`
}

// Encode returns the event's wire form.
func (e Event) Encode() ([]byte, error) {
	if !e.Type.Valid() {
		return nil, fmt.Errorf("encoding event %s: unknown type %q", e.ID, e.Type)
	}
	e.At = e.At.UTC()
	if e.LostSince != nil {
		utc := e.LostSince.UTC()
		e.LostSince = &utc
	}
	if e.Severity == "" {
		e.Severity = SeverityOf(e.Type, e.Data)
	}
	return json.Marshal(e)
}

// Decode parses an event's wire form and checks its required fields.
func Decode(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("decoding event: %w", err)
	}
	switch {
	case e.ID == "":
		return Event{}, fmt.Errorf("decoding event: no id")
	case !e.Type.Valid():
		return Event{}, fmt.Errorf("decoding event %s: unknown type %q", e.ID, e.Type)
	case e.SensorID == "":
		return Event{}, fmt.Errorf("decoding event %s: no sensor_id", e.ID)
	case e.At.IsZero():
		return Event{}, fmt.Errorf("decoding event %s: no time", e.ID)
	}
	if e.Severity == "" {
		e.Severity = SeverityOf(e.Type, e.Data)
	}
	return e, nil
}

// StateChangedID derives a state_changed event's id from the reading that caused it:
// the sensor and the reading's position in the readings topic, which includes the
// topic's identity (its Kafka topic id): a topic deleted and created again starts
// its offsets at 0, and its readings must not take the ids of the old topic's,
// or every step downstream would drop their events as replays. A zero topicID
// (a broker that sends none) derives the id from partition and offset alone.
func StateChangedID(sensorID string, topicID [16]byte, partition int32, offset int64) string {
	var pos [28]byte
	binary.BigEndian.PutUint32(pos[:4], uint32(partition))
	binary.BigEndian.PutUint64(pos[4:12], uint64(offset))
	if topicID == ([16]byte{}) {
		return derive(StateChanged, sensorID, pos[:12])
	}
	copy(pos[12:], topicID[:])
	return derive(StateChanged, sensorID, pos[:])
}

// ConnectionLostID derives a connection_lost event's id from the sensor and the
// deadline it missed, so several heartbeat daemons (or a replay) agree on it.
func ConnectionLostID(sensorID string, deadline time.Time) string {
	return derive(ConnectionLost, sensorID, unixMillis(deadline))
}

// ConnectionRestoredID derives a connection_restored event's id from the loss it
// ends: one loss, one restore.
func ConnectionRestoredID(sensorID string, deadline time.Time) string {
	return derive(ConnectionRestored, sensorID, unixMillis(deadline))
}

// SensorOpenTooLongID derives a sensor_open_too_long event's id from the sensor
// and the time it was unlocked: one alert per opening, whoever emits it.
func SensorOpenTooLongID(sensorID string, openedAt time.Time) string {
	return derive(SensorOpenTooLong, sensorID, unixMillis(openedAt))
}

// SiteOutageID derives a site_outage's id from the site and the earliest
// deadline its sensors missed, so heartbeat processes agree on it.
func SiteOutageID(site string, startedAt time.Time) string {
	return derive(SiteOutage, site, unixMillis(startedAt))
}

// SiteRestoredID derives a site_restored's id from the outage it ends.
func SiteRestoredID(site string, startedAt time.Time) string {
	return derive(SiteRestored, site, unixMillis(startedAt))
}

// MaintenanceEndedID derives a maintenance_ended's id from its window's id.
func MaintenanceEndedID(windowID string) string {
	return derive(MaintenanceEnded, windowID, nil)
}

// SensorUnstableID derives a sensor_unstable's id from the sensor and the
// time its streak began; SensorStableID the id of the sensor_stable that ends
// that streak, so whoever notices the end (the consumer at the next change,
// the heartbeat after a quiet window) publishes the same one.
func SensorUnstableID(sensorID string, since time.Time) string {
	return derive(SensorUnstable, sensorID, unixMillis(since))
}

// SensorStableID: see SensorUnstableID.
func SensorStableID(sensorID string, since time.Time) string {
	return derive(SensorStable, sensorID, unixMillis(since))
}

func unixMillis(t time.Time) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.UnixMilli()))
	return b[:]
}

// derive hashes the type, sensor and position into a 32-hex-digit id (128 bits of
// SHA-256: collisions are not a practical concern).
func derive(t Type, sensorID string, position []byte) string {
	h := sha256.New()
	h.Write([]byte(t))
	h.Write([]byte{0})
	h.Write([]byte(sensorID))
	h.Write([]byte{0})
	h.Write(position)
	return hex.EncodeToString(h.Sum(nil)[:16])
}
