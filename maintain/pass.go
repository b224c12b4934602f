package maintain

import (
	"context"
	"errors"
	"time"

	"github.com/lockstream/lockstream/storage"
)

// monthStart is the first instant of t's month, UTC.
func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// RunOnce makes one pass: partitions ahead, Postgres retention (partitions and
// notification keys), ClickHouse retention, and with WithRollupRepair the
// last closed month's rollups checked (rebuilt if they drift). It goes on past
// a failing step and returns every error joined.
func (mt *Maintainer) RunOnce(ctx context.Context) (Report, error) {
	var rep Report
	now := mt.cfg.Now()
	errs := []error{mt.createAhead(ctx, now, &rep), mt.dropOld(ctx, now, &rep), mt.expireKeys(ctx, now, &rep)}
	if mt.history != nil && mt.cfg.HistoryRetention > 0 {
		errs = append(errs, mt.dropHistory(ctx, now, &rep))
	}
	if mt.rollups != nil {
		errs = append(errs, mt.repairRollups(ctx, now, &rep))
	}
	for _, table := range mt.cfg.Tables {
		n, err := mt.store.DefaultPartitionRows(ctx, table)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		mt.m.defaultRows.WithLabelValues(table).Set(float64(n))
	}
	return rep, errors.Join(errs...)
}

// createAhead makes this month's partition and Ahead more of every table.
func (mt *Maintainer) createAhead(ctx context.Context, now time.Time, rep *Report) error {
	var errs []error
	for _, table := range mt.cfg.Tables {
		existing, err := mt.store.MonthPartitions(ctx, table)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		have := map[time.Time]bool{}
		for _, p := range existing {
			have[p.Month] = true
		}
		for i := 0; i <= mt.cfg.Ahead; i++ {
			month := monthStart(now).AddDate(0, i, 0)
			if have[month] {
				continue
			}
			name, err := mt.store.CreateMonthPartition(ctx, table, month)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if name != "" {
				rep.Created = append(rep.Created, name)
				mt.m.created.WithLabelValues(table).Inc()
				mt.logger.InfoContext(ctx, "partition created", "table", table, "partition", name)
			}
		}
	}
	return errors.Join(errs...)
}

// dropOld drops every month partition whose month ended before now-Retention,
// except the months in which deliveries still holds an open delivery: those
// are kept in every table, logged and counted.
func (mt *Maintainer) dropOld(ctx context.Context, now time.Time, rep *Report) error {
	cutoff := now.Add(-mt.cfg.Retention)
	old := func(p storage.MonthPartition) bool { return !p.Month.AddDate(0, 1, 0).After(cutoff) }
	held := map[time.Time]int64{}
	deliveries, err := mt.store.MonthPartitions(ctx, "deliveries")
	if err != nil {
		return err
	}
	for _, p := range deliveries {
		if !old(p) {
			continue
		}
		n, err := mt.store.OpenDeliveries(ctx, p)
		if err != nil {
			return err // unsure whether it is held: drop nothing this pass
		}
		if n > 0 {
			held[p.Month] = n
		}
	}
	var errs []error
	kept := 0
	for _, table := range mt.cfg.Tables {
		parts, err := mt.store.MonthPartitions(ctx, table)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range parts {
			if !old(p) {
				continue
			}
			if n, ok := held[p.Month]; ok {
				kept++
				rep.Kept = append(rep.Kept, p.Name)
				mt.logger.WarnContext(ctx, "partition past retention kept: its month holds open deliveries",
					"partition", p.Name, "open_deliveries", n)
				continue
			}
			if err := mt.store.DropMonthPartition(ctx, p); err != nil {
				errs = append(errs, err)
				continue
			}
			rep.Dropped = append(rep.Dropped, p.Name)
			mt.m.dropped.WithLabelValues(table).Inc()
			mt.logger.InfoContext(ctx, "partition dropped", "table", table, "partition", p.Name)
		}
	}
	mt.m.kept.Set(float64(kept))
	return errors.Join(errs...)
}

// dropHistory drops ClickHouse month partitions whose month ended before
// now-HistoryRetention.
func (mt *Maintainer) dropHistory(ctx context.Context, now time.Time, rep *Report) error {
	parts, err := mt.history.HistoryPartitions(ctx, mt.cfg.HistoryTables)
	if err != nil {
		return err
	}
	cutoff := now.Add(-mt.cfg.HistoryRetention)
	var errs []error
	for _, hp := range parts {
		if hp.Month.AddDate(0, 1, 0).After(cutoff) {
			continue
		}
		if err := mt.history.DropHistoryPartition(ctx, hp); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.HistoryDropped = append(rep.HistoryDropped, hp.Table+"/"+hp.ID)
		mt.m.historyDropped.WithLabelValues(hp.Table).Inc()
		mt.logger.InfoContext(ctx, "history partition dropped", "table", hp.Table, "partition", hp.ID)
	}
	return errors.Join(errs...)
}

// Bounds of expireKeys: keys deleted per statement, statements per pass. A
// pass deletes up to a million keys; more wait for the next pass.
const (
	keyBatch      = 10000
	keyBatchesMax = 100
)

// expireKeys deletes the notification idempotency keys recorded before
// now-Retention, a batch per statement (short row locks, bounded WAL per
// statement). The table is not partitioned (a key must be unique whatever month
// its copies come in), so it is the one place retention deletes rows.
func (mt *Maintainer) expireKeys(ctx context.Context, now time.Time, rep *Report) error {
	before := now.Add(-mt.cfg.Retention)
	for range keyBatchesMax {
		n, err := mt.store.DeleteNotificationKeys(ctx, before, keyBatch)
		rep.KeysDeleted += n
		mt.m.keysDeleted.Add(float64(n))
		if err != nil || n < keyBatch {
			return err
		}
	}
	return nil
}
