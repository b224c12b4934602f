package maintain

import (
	"context"
	"errors"
	"time"

	"github.com/lockstream/lockstream/analytics"
)

// Rollups seals the analytics rollups (analytics.Store).
type Rollups interface {
	SealRollups(ctx context.Context, before time.Time) (analytics.SealReport, error)
}

// WithRollupRepair makes each pass seal the analytics rollups of every hour
// that ended before it and is unsealed or touched since its seal
// (docs/DESIGN.md "Analytics", seals): a batch the history writer replayed is
// read from raw rows until then, and counted once in the rollups after.
func WithRollupRepair(r Rollups) Option {
	return func(mt *Maintainer) error {
		if r == nil {
			return errors.New("maintain: WithRollupRepair needs the rollups")
		}
		mt.rollups = r
		return nil
	}
}

// repairRollups seals the hours that ended before now, and the analytics
// levels' buckets that did. The hour in progress is left: rows still arrive
// in it, each unsealing it again. Level corrections are logged, not counted
// in RollupRowsCorrected (the hourly rollups' rows).
func (mt *Maintainer) repairRollups(ctx context.Context, now time.Time, rep *Report) error {
	sealed, err := mt.rollups.SealRollups(ctx, now.Truncate(time.Hour))
	rep.RollupHoursSealed += sealed.Hours
	rep.RollupRowsCorrected += sealed.Corrected
	mt.m.rollupCorrections.Add(float64(sealed.Corrected))
	if sealed.Corrected > 0 || sealed.LevelCorrected > 0 {
		mt.logger.WarnContext(ctx, "analytics rollups differed from the raw history (a replayed batch): corrected",
			"hours", sealed.Hours, "rows", sealed.Corrected, "level_buckets", sealed.LevelBuckets, "level_rows", sealed.LevelCorrected)
	}
	return err
}
