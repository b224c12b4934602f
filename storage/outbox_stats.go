package storage

import (
	"context"
	"fmt"
	"time"
)

// AnalyzeOutboxMonth analyzes the deliveries and notifications partitions of
// the month ("200601"), or the DEFAULT partitions where the month has none, and
// the month's delivery_attempts partition, and the webhooks in flight.
func (p *Postgres) AnalyzeOutboxMonth(ctx context.Context, month string) error {
	if _, err := time.Parse("200601", month); err != nil {
		return fmt.Errorf("analyzing the outbox: month %q: %w", month, err)
	}
	// The month is six digits (checked above), so the names are safe to splice.
	_, err := p.pool.Exec(ctx, `DO $$ BEGIN
		IF to_regclass('deliveries_`+month+`') IS NOT NULL AND to_regclass('notifications_`+month+`') IS NOT NULL THEN
			ANALYZE deliveries_`+month+`, notifications_`+month+`;
		ELSE
			ANALYZE deliveries_default, notifications_default;
		END IF;
		-- The attempts of a burst are logged in the month they are made,
		-- usually the same: the retrier's copy to ClickHouse reads them.
		IF to_regclass('delivery_attempts_`+month+`') IS NOT NULL THEN
			ANALYZE delivery_attempts_`+month+`;
		END IF;
		-- The hand-over's rows come and go by the thousand: a plan made while
		-- the table looked empty scans it (migration 00240).
		ANALYZE webhooks_in_flight;
	END $$`)
	if err != nil {
		return fmt.Errorf("analyzing the outbox partitions of %s: %w", month, err)
	}
	return nil
}
