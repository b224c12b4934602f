package domain

import "time"

// UnregisteredSensor is an unregistered sensor id with its readings since some
// time, summed over the consumer processes' summaries: the consumer counts
// them, the API shows them.
type UnregisteredSensor struct {
	SensorID string
	// Count is an upper bound of the readings seen; MinCount a lower bound.
	Count, MinCount int64
	LastSeen        time.Time
}
