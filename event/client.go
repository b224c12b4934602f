package event

import "time"

// SensorRef names the sensor a client's event is about: its id and where it is.
type SensorRef struct {
	ID      string `json:"id"`
	Address string `json:"address"`
}

// ClientEvent is an event as a client sees it, declared once: the body of its
// webhook (with the attempt, notifier/webhook.Body), its feed (GET
// /v1/clients/{id}/events) and the AMQP republisher carry this shape. It is
// the event of lockstream.events told to one client: the sensor named with
// its address, and the client's own sequence number.
type ClientEvent struct {
	// ID is the event id; webhooks also carry it as webhook-id, the same across
	// attempts, so receivers can drop duplicates.
	ID     string    `json:"id"`
	Type   Type      `json:"type"`
	Sensor SensorRef `json:"sensor"`
	// Data is the new state for state_changed, the last known one for the
	// connection events.
	Data *int `json:"data"`
	// Previous is the state before a state_changed; nil for a sensor's first reading.
	Previous *int      `json:"previous"`
	At       time.Time `json:"at"`
	// Severity grades the event: critical, warning or info.
	Severity Severity `json:"severity"`
	// Seq is the event's number in the client's sequence (1, 2, 3…, no gap):
	// GET /v1/clients/{id}/events?after=<seq> lists what came after it.
	// Absent only for events from before seqs existed.
	Seq int64 `json:"seq,omitempty"`
	// Site and Sensors are set for a site event (site_outage, site_restored):
	// the site and the ids of the sensors it is about; Sensor is then the
	// first of them.
	Site    string   `json:"site,omitempty"`
	Sensors []string `json:"sensors,omitempty"`
	// LostSince and SilentSeconds, on a connection_restored, say how long the
	// sensor was lost: its last reading before the loss, and the whole
	// seconds from then to At.
	LostSince     *time.Time `json:"lost_since,omitempty"`
	SilentSeconds int64      `json:"silent_seconds,omitempty"`
	// Detail says what an operational notice (endpoint_failing,
	// endpoint_disabled, endpoint_recovered: feed only) is about.
	Detail string `json:"detail,omitempty"`
	// IncidentID names the incident of an incident event (incident_opened,
	// incident_acknowledged, incident_resolved); Sensor is its sensor, or
	// empty for a site incident.
	IncidentID string `json:"incident_id,omitempty"`
}
