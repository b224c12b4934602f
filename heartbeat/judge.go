package heartbeat

import (
	"context"
	"fmt"
	"time"

	"github.com/lockstream/lockstream/event"
)

// States reads sensors' last known states and sites (PostgresStore): a
// loss carries the state the sensor was lost in, which grades it
// (event.SeverityOf), and is judged with its site.
type States interface {
	SensorFacts(ctx context.Context, ids []string) (map[string]SensorFact, error)
}

// OpenAlerts finds sensors left unlocked longer than their open_alert_after and
// records the openings reported (PostgresStore).
type OpenAlerts interface {
	DueOpenAlerts(ctx context.Context, now time.Time, limit int) ([]OpenAlert, error)
	MarkOpenAlerted(ctx context.Context, alerts []OpenAlert) error
}

// alertOpen publishes a sensor_open_too_long event for every sensor unlocked
// longer than its open_alert_after at cutoff, a chunk at a time, then records
// the openings reported. The event's id names the opening, so a daemon that
// dies between publishing and recording, or two daemons finding the same
// opening, publish the same id, which downstream drops: once per opening.
// Judged by the sweep's cutoff, so a lagging consumer (a lock reading not yet
// consumed) does not fake an alert.
func (d *Daemon) alertOpen(ctx context.Context, cutoff func() time.Time) error {
	if d.deps.OpenAlerts == nil {
		return nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		due, err := d.deps.OpenAlerts.DueOpenAlerts(ctx, cutoff(), d.cfg.ClaimBatch)
		if err != nil {
			return err
		}
		if len(due) == 0 {
			return nil
		}
		events := make([]event.Event, len(due))
		for i, a := range due {
			events[i] = openTooLongEvent(a)
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.PublishTimeout)
		err = d.deps.Publisher.Publish(pctx, events)
		if err == nil {
			err = d.deps.OpenAlerts.MarkOpenAlerted(pctx, due)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("publishing %d open-too-long alerts: %w", len(due), err)
		}
		d.openAlerts.Add(float64(len(due)))
		if len(due) < d.cfg.ClaimBatch {
			return nil
		}
	}
}

func openTooLongEvent(a OpenAlert) event.Event {
	unlocked := event.Unlocked
	return event.Event{
		ID:       event.SensorOpenTooLongID(a.SensorID, a.OpenedAt),
		Type:     event.SensorOpenTooLong,
		SensorID: a.SensorID,
		Data:     &unlocked,
		At:       a.At().UTC(),
		Severity: event.Critical,
	}
}
