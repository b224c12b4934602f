package heartbeat

import (
	"context"
	"fmt"
	"time"

	"github.com/lockstream/lockstream/event"
)

// Maintenance keeps maintenance windows (PostgresStore).
type Maintenance interface {
	CoverByMaintenance(ctx context.Context, sensors, sites []string, deadlines []time.Time) (map[string]string, error)
	EndMaintenance(ctx context.Context, cutoff, now time.Time, limit int) ([]MaintenanceWindow, error)
	UnpublishedMaintenanceEnds(ctx context.Context, before time.Time, limit int) ([]MaintenanceWindow, error)
	MarkMaintenanceEndsPublished(ctx context.Context, ids []string, at time.Time) error
	SiteMembers(ctx context.Context, sites []string) (map[string][]string, error)
}

// inMaintenance returns, for each loss that falls in a maintenance window of
// its sensor or its site, the id of the window's maintenance_ended (which is
// delivered instead of the loss); the windows record the sensors as silent.
func (d *Daemon) inMaintenance(ctx context.Context, losses []Deadline, facts map[string]SensorFact) (map[string]string, error) {
	if d.deps.Maintenance == nil || len(losses) == 0 {
		return nil, nil
	}
	sensors := make([]string, len(losses))
	sites := make([]string, len(losses))
	deadlines := make([]time.Time, len(losses))
	for i, l := range losses {
		sensors[i], sites[i], deadlines[i] = l.SensorID, facts[l.SensorID].Site, l.Deadline
	}
	windows, err := d.deps.Maintenance.CoverByMaintenance(ctx, sensors, sites, deadlines)
	if err != nil {
		return nil, err
	}
	covered := make(map[string]string, len(windows))
	for sensor, window := range windows {
		covered[sensor] = event.MaintenanceEndedID(window)
	}
	return covered, nil
}

// sweepMaintenance ends the windows whose end the cutoff has passed (one
// daemon ends each) and publishes one maintenance_ended per window, and
// publishes again those whose publisher failed or died.
func (d *Daemon) sweepMaintenance(ctx context.Context, cutoff time.Time) error {
	if d.deps.Maintenance == nil {
		return nil
	}
	stale, err := d.deps.Maintenance.UnpublishedMaintenanceEnds(ctx, d.cfg.Now().Add(-2*d.cfg.PublishTimeout), d.cfg.ClaimBatch)
	if err != nil {
		return err
	}
	if err := d.publishMaintenanceEnds(ctx, stale); err != nil {
		return err
	}
	ended, err := d.deps.Maintenance.EndMaintenance(ctx, cutoff, d.cfg.Now(), d.cfg.ClaimBatch)
	if err != nil {
		return err
	}
	return d.publishMaintenanceEnds(ctx, ended)
}

// publishMaintenanceEnds publishes the windows' maintenance_ended events
// (sensor_id: the window's sensor, or the first silent sensor, or the first
// sensor of the site; a site with no sensor left tells nobody) and records
// them published.
func (d *Daemon) publishMaintenanceEnds(ctx context.Context, windows []MaintenanceWindow) error {
	if len(windows) == 0 {
		return nil
	}
	var sites []string
	for _, w := range windows {
		if w.Site != "" {
			sites = append(sites, w.Site)
		}
	}
	members, err := d.deps.Maintenance.SiteMembers(ctx, sites)
	if err != nil {
		return err
	}
	var events []event.Event
	ids := make([]string, len(windows))
	for i, w := range windows {
		ids[i] = w.ID
		e := event.Event{ID: event.MaintenanceEndedID(w.ID), Type: event.MaintenanceEnded, SensorID: w.SensorID,
			Site: w.Site, Sensors: w.Silent, At: w.To.UTC(), Severity: event.Info}
		switch {
		case e.SensorID != "":
		case len(w.Silent) > 0:
			e.SensorID = w.Silent[0]
		case len(members[w.Site]) > 0:
			e.SensorID = members[w.Site][0]
		default:
			continue
		}
		events = append(events, e)
		d.logger.InfoContext(ctx, "maintenance ended", "sensor_id", w.SensorID, "site", w.Site, "silent", w.Silent)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.PublishTimeout)
	defer cancel()
	if len(events) > 0 {
		if err := d.deps.Publisher.Publish(pctx, events); err != nil {
			return fmt.Errorf("publishing %d maintenance ends: %w", len(events), err)
		}
	}
	return d.deps.Maintenance.MarkMaintenanceEndsPublished(pctx, ids, d.cfg.Now())
}

// Flapping finds unstable sensors quiet for a flap window and ends their
// streaks (PostgresStore).
type Flapping interface {
	DueStable(ctx context.Context, now time.Time, window time.Duration, limit int) ([]Stabilized, error)
	ClearUnstable(ctx context.Context, stable []Stabilized) error
}

// sweepStable publishes a sensor_stable, with the final state, for every
// unstable sensor whose last change is a FlapWindow before the cutoff (judged
// by the watermark, so a change the consumer has not reached yet cannot be
// missed), then ends the streaks. The id names the streak: the consumer,
// seeing the next change first, publishes the same one.
func (d *Daemon) sweepStable(ctx context.Context, cutoff time.Time) error {
	if d.deps.Flapping == nil {
		return nil
	}
	due, err := d.deps.Flapping.DueStable(ctx, cutoff, d.cfg.FlapWindow, d.cfg.ClaimBatch)
	if err != nil || len(due) == 0 {
		return err
	}
	events := make([]event.Event, len(due))
	for i, s := range due {
		data := s.Data
		events[i] = event.Event{ID: event.SensorStableID(s.SensorID, s.UnstableSince), Type: event.SensorStable,
			SensorID: s.SensorID, Data: &data, At: s.ChangedAt.Add(d.cfg.FlapWindow).UTC()}
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.PublishTimeout)
	defer cancel()
	if err := d.deps.Publisher.Publish(pctx, events); err != nil {
		return fmt.Errorf("publishing %d sensor_stable: %w", len(events), err)
	}
	return d.deps.Flapping.ClearUnstable(pctx, due)
}
