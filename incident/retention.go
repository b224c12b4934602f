package incident

import (
	"context"
	"fmt"
	"time"
)

// DefaultRetention is how long a resolved incident is kept: a year and a
// month, so the client's reports of the past year still list it.
const DefaultRetention = 400 * 24 * time.Hour

// PurgeResolved deletes up to limit incidents resolved before before, oldest
// first, with their tiers, timeline and ack tokens, and returns how many it
// deleted. Rows another purge holds are skipped, so several processes can
// purge at once.
func (p *PostgresStore) PurgeResolved(ctx context.Context, before time.Time, limit int) (int, error) {
	tag, err := p.pool.Exec(ctx, `DELETE FROM incidents WHERE id IN (
		SELECT id FROM incidents WHERE state = 'resolved' AND resolved_at < $1
		ORDER BY resolved_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, before, limit)
	if err != nil {
		return 0, fmt.Errorf("purging resolved incidents: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// purge deletes what has outlived its keep, a batch of each: ack tokens a day
// past their expiry (a late click still hears "expired" until then) and, with
// a Retention, incidents resolved longer ago than it.
func (r *Runner) purge(ctx context.Context) error {
	now := r.cfg.Now()
	if _, err := r.store.PurgeTokens(ctx, now.Add(-tokenKeep), r.cfg.Batch); err != nil {
		return err
	}
	if r.cfg.Retention <= 0 {
		return nil
	}
	n, err := r.store.PurgeResolved(ctx, now.Add(-r.cfg.Retention), r.cfg.Batch)
	if err != nil {
		return err
	}
	r.m.incidents.WithLabelValues("purged").Add(float64(n))
	return nil
}
