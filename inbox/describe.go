package inbox

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/lockstream/lockstream/event"
)

// Describe is how m reads to a person, as the API, its stream and the CyVerse
// API show it: a sensor event's subject and text (a JSON string) in words, a
// free-form notification's own subject and message (JSON null when it has
// none).
func (m Message) Describe() (subject string, message json.RawMessage) {
	subject, message = m.Subject, m.Message
	if m.SensorID != "" {
		subject, message = describeSensorMessage(m)
	}
	if message == nil {
		message = json.RawMessage("null")
	}
	return subject, message
}

// describeSensorMessage writes the subject and text of a sensor event's message,
// as a person reads them. data 1 is locked, 0 unlocked.
func describeSensorMessage(m Message) (string, json.RawMessage) {
	where := m.SensorID
	if m.SensorAddress != "" {
		where = fmt.Sprintf("%s (%s)", m.SensorAddress, m.SensorID)
	}
	state := func(v *int) string {
		switch {
		case v == nil:
			return "unknown"
		case *v == 1:
			return "locked"
		default:
			return "unlocked"
		}
	}
	var subject, text string
	switch m.Type {
	case "state_changed":
		subject = fmt.Sprintf("%s %s", m.SensorID, state(m.Data))
		text = fmt.Sprintf("The lock at %s was %s.", where, state(m.Data))
	case "connection_lost":
		subject = fmt.Sprintf("%s lost its connection", m.SensorID)
		text = fmt.Sprintf("The lock at %s stopped reporting; it was last %s.", where, state(m.Data))
	case "connection_restored":
		subject = fmt.Sprintf("%s is back online", m.SensorID)
		text = fmt.Sprintf("The lock at %s reports again.", where)
		if lostSince, silent, ok := m.Outage(); ok {
			subject += " after " + event.Outage(silent)
			text = fmt.Sprintf("The lock at %s reports again after %s without a reading (its last reading before the loss was at %s).",
				where, event.Outage(silent), lostSince.UTC().Format(time.RFC3339))
		}
	case "site_outage":
		site := siteName(m)
		subject = fmt.Sprintf("%s is out", site)
		text = fmt.Sprintf("Several locks of %s lost their connection at once, among them the lock at %s.", site, where)
	case "site_restored":
		site := siteName(m)
		subject = fmt.Sprintf("%s is back", site)
		text = fmt.Sprintf("Most locks of %s report again, among them the lock at %s.", site, where)
	case "sensor_unstable":
		subject = fmt.Sprintf("%s is unstable", m.SensorID)
		text = fmt.Sprintf("The lock at %s changes too often; its changes are held until it settles.", where)
	case "sensor_stable":
		subject = fmt.Sprintf("%s settled: %s", m.SensorID, state(m.Data))
		text = fmt.Sprintf("The lock at %s settled; it is %s.", where, state(m.Data))
	case "maintenance_ended":
		subject = fmt.Sprintf("maintenance of %s ended", m.SensorID)
		text = fmt.Sprintf("A maintenance window of the lock at %s (or its site) ended.", where)
	case "sensor_open_too_long":
		subject = fmt.Sprintf("%s unlocked too long", m.SensorID)
		text = fmt.Sprintf("The lock at %s has been unlocked for longer than its alert allows.", where)
	default:
		subject = fmt.Sprintf("%s: %s", m.SensorID, m.Type)
		text = fmt.Sprintf("%s at %s.", m.Type, where)
	}
	encoded, _ := json.Marshal(text) // a string always encodes
	return subject, encoded
}

// siteName names the site of a site event's message: the inbox keeps the
// event's first sensor, whose site is read with the message.
func siteName(m Message) string {
	if m.SensorSite == "" {
		return "the site of " + m.SensorID
	}
	return "site " + m.SensorSite
}

// Outage is how long a connection_restored's sensor was lost, as its message
// was stored when the fan-out wrote it: the sensor's last reading before the
// loss and the seconds from then to the restoring reading; ok is false for
// other messages and for restores fanned out before outages were kept.
func (m Message) Outage() (lostSince time.Time, silentSeconds int64, ok bool) {
	if m.Type != "connection_restored" || len(m.Message) == 0 {
		return time.Time{}, 0, false
	}
	var o struct {
		LostSince     *time.Time `json:"lost_since"`
		SilentSeconds int64      `json:"silent_seconds"`
	}
	if json.Unmarshal(m.Message, &o) != nil || o.LostSince == nil {
		return time.Time{}, 0, false
	}
	return *o.LostSince, o.SilentSeconds, true
}
