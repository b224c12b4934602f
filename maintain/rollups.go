package maintain

import (
	"context"
	"errors"
	"time"

	"github.com/lockstream/lockstream/analytics"
)

// Rollups checks and repairs the analytics rollups (analytics.Store).
type Rollups interface {
	CheckRollups(ctx context.Context, month time.Time) (analytics.RollupDrift, error)
	RebuildRollups(ctx context.Context, from, to time.Time) error
}

// WithRollupRepair makes each pass compare the last closed month's rollups
// with the raw history, once RollupSettle has passed since it ended, and
// rebuild that month when they differ (docs/DESIGN.md "Analytics", copies
// and backfill): a batch the history writer replayed is then counted once.
func WithRollupRepair(r Rollups) Option {
	return func(mt *Maintainer) error {
		if r == nil {
			return errors.New("maintain: WithRollupRepair needs the rollups")
		}
		mt.rollups = r
		return nil
	}
}

// repairRollups checks the month before now's, from RollupSettle after it
// ended until it is no longer the last closed month, and rebuilds it when its
// rollups drift from its raw rows. The open month is never rebuilt: rows the
// writer inserts during a rebuild would be lost from it. A rebuild that
// raced with a late row is caught by the next pass's check.
func (mt *Maintainer) repairRollups(ctx context.Context, now time.Time, rep *Report) error {
	current := monthStart(now)
	if now.Before(current.Add(mt.cfg.RollupSettle)) {
		return nil
	}
	month := current.AddDate(0, -1, 0)
	drift, err := mt.rollups.CheckRollups(ctx, month)
	if err != nil || drift.Zero() {
		return err
	}
	mt.logger.WarnContext(ctx, "analytics rollups differ from the raw history: rebuilding the month",
		"month", month.Format("2006-01"), "readings", drift.Readings, "events", drift.Events,
		"fleet_readings", drift.FleetReadings, "fleet_events", drift.FleetEvents)
	if err := mt.rollups.RebuildRollups(ctx, month, current); err != nil {
		return err
	}
	rep.RollupsRebuilt = append(rep.RollupsRebuilt, month.Format("200601"))
	mt.m.rollupRebuilds.Inc()
	return nil
}
