package domain

import "time"

// The connections the heartbeat reports of a sensor.
const (
	ConnectionOnline  = "online"
	ConnectionLost    = "lost"
	ConnectionUnknown = "unknown"
)

// SensorConnection is what the heartbeat knows of one sensor's connection: the
// heartbeat answers it, the API and the console show it.
type SensorConnection struct {
	// LastSeen is when the sensor was last seen, within the heartbeat's
	// coalescing window; zero when the heartbeat does not know the sensor.
	LastSeen time.Time
	// Connection is ConnectionOnline, ConnectionLost or ConnectionUnknown.
	Connection string
}

// LostSensor is a sensor that is lost now.
type LostSensor struct {
	// SensorID names the sensor.
	SensorID string
	// LastSeen is when it last reported, within the coalescing window.
	LastSeen time.Time
	// LostAt is the deadline it missed: the time of its connection_lost event.
	LostAt time.Time
}

// MaintenanceWindow is a time when a sensor, or every sensor of a site, is
// expected to go silent: its losses are notified to nobody, and one
// maintenance_ended lists them when it ends. The API sets it; the heartbeat
// keeps and ends it.
type MaintenanceWindow struct {
	ID string
	// SensorID or Site (exactly one) says what the window is for.
	SensorID string
	Site     string
	// From is inclusive, To exclusive: a loss whose deadline falls in it is
	// covered.
	From, To time.Time
	// Silent lists the sensors lost inside it, in id order.
	Silent []string
	// EndedAt is when a heartbeat ended it; zero before.
	EndedAt time.Time
}
