package swrve

import (
	"cmp"
	"context"
	"fmt"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/notifier"
)

// PrototypePrefix is put before an event type to name the message prototype
// of its notifications: sensor.state_changed, sensor.connection_lost,
// sensor.connection_restored, sensor.sensor_open_too_long, ...
const PrototypePrefix = "sensor."

// NotificationSender sends sensor notifications as pushes through a Sender;
// it is the retrier's PushSender.
type NotificationSender struct {
	s *Sender
}

// Notifications returns the adapter that sends sensor notifications through s,
// sharing its rate and pool.
func (s *Sender) Notifications() NotificationSender {
	return NotificationSender{s: s}
}

// Send pushes n to the device target: the event type picks the message
// prototype (PrototypePrefix + type), and the message names the sensor, where
// it is and its state.
func (ns NotificationSender) Send(ctx context.Context, target domain.PushTarget, n notifier.Notification) notifier.Result {
	return ns.s.Send(ctx, Push{
		Platform:            target.Platform,
		MessagePrototypeKey: PrototypePrefix + string(n.Type),
		PushKey:             target.PushKey,
		Message:             Message(n),
	})
}

// Message is the short text a sensor notification is pushed with, for example
// "Sensor s1 (Main St 1) is now locked"; a critical one starts with
// "Critical: ".
func Message(n notifier.Notification) string {
	if n.Severity == event.Critical {
		return "Critical: " + message(n)
	}
	return message(n)
}

func message(n notifier.Notification) string {
	sensor := "Sensor " + cmp.Or(n.SensorID, "?")
	if n.SensorAddress != "" {
		sensor += " (" + n.SensorAddress + ")"
	}
	switch n.Type {
	case event.StateChanged:
		return fmt.Sprintf("%s is now %s", sensor, stateWord(n.Data))
	case event.ConnectionLost:
		msg := sensor + " lost its connection"
		if n.Data != nil {
			msg += "; last known state: " + stateWord(n.Data)
		}
		return msg
	case event.ConnectionRestored:
		msg := sensor + " is reporting again"
		if n.LostSince != nil {
			msg += " after " + event.Outage(event.SilentSeconds(n.LostSince, n.At))
		}
		if n.Data != nil {
			msg += "; it is " + stateWord(n.Data)
		}
		return msg
	case event.SensorOpenTooLong:
		return sensor + " has been unlocked for too long"
	case event.SiteOutage:
		if len(n.Sensors) == 1 {
			return fmt.Sprintf("Site %s is out: 1 sensor lost its connection", n.Site)
		}
		return fmt.Sprintf("Site %s is out: %d sensors lost their connection", n.Site, len(n.Sensors))
	case event.SensorUnstable:
		return sensor + " changes too often; its changes are held until it settles"
	case event.SensorStable:
		return fmt.Sprintf("%s settled: it is %s", sensor, stateWord(n.Data))
	case event.MaintenanceEnded:
		what := sensor
		if n.Site != "" {
			what = "Site " + n.Site
		}
		if len(n.Sensors) == 0 {
			return what + ": maintenance ended; no sensor went silent during it"
		}
		return fmt.Sprintf("%s: maintenance ended; %s went silent during it", what, sensorCount(len(n.Sensors)))
	case event.SiteRestored:
		return fmt.Sprintf("Site %s is back: most of its sensors report again", n.Site)
	}
	return sensor + ": " + string(n.Type)
}

// sensorCount says "1 sensor" or "n sensors": a site's outage threshold
// (LOCKSTREAM_SITE_OUTAGE_MIN) may be 1.
func sensorCount(n int) string {
	if n == 1 {
		return "1 sensor"
	}
	return fmt.Sprintf("%d sensors", n)
}

// stateWord names a sensor state: 1 is locked, 0 unlocked.
func stateWord(data *int) string {
	switch {
	case data == nil:
		return "in an unknown state"
	case *data == 1:
		return "locked"
	case *data == 0:
		return "unlocked"
	}
	return fmt.Sprintf("in state %d", *data)
}
