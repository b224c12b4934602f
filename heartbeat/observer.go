package heartbeat

import (
	"context"
	"time"
)

// The Tracker follows the registry as the admin API changes it (it is the
// API's SensorObserver): a registered sensor is tracked from its
// registration, a changed timeout applies at once, a deleted sensor is
// forgotten. Errors are the API's to log: the registry's change is already
// committed.

// SensorCreated starts the sensor's deadline at registration, so one that never
// reports is still declared lost; a timeout given at creation applies from the
// start (the cache of timeouts does not know the sensor yet).
func (t *Tracker) SensorCreated(ctx context.Context, sensorID string, createdAt time.Time) error {
	timeout, err := t.timeouts.HeartbeatTimeout(ctx, sensorID)
	if err != nil {
		return err
	}
	if timeout > 0 {
		if err := t.SetTimeout(ctx, sensorID, timeout); err != nil {
			return err
		}
	}
	return t.Register(ctx, sensorID, createdAt)
}

// SensorUpdated applies the sensor's heartbeat timeout, changed or not, at once.
func (t *Tracker) SensorUpdated(ctx context.Context, sensorID string) error {
	timeout, err := t.timeouts.HeartbeatTimeout(ctx, sensorID)
	if err != nil {
		return err
	}
	return t.SetTimeout(ctx, sensorID, timeout)
}

// SensorDeleted stops tracking the sensor.
func (t *Tracker) SensorDeleted(ctx context.Context, sensorID string) error {
	return t.Forget(ctx, sensorID)
}
