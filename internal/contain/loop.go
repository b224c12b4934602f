package contain

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Loop runs step at once and then every interval until ctx is cancelled, then
// returns nil: the loop of a daemon that works in rounds. A step that reports
// more (a full round: work may be left) runs again at once. A step that fails
// or panics (contained as in Run, counted in panics under where) is logged
// and the next one tries again; a step in progress when ctx is cancelled ends
// the loop once it returns.
func Loop(ctx context.Context, interval time.Duration, where string, panics *prometheus.CounterVec, logger *slog.Logger,
	step func(context.Context) (more bool, err error)) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		var more bool
		err := Run(ctx, where, panics, func(ctx context.Context) (err error) {
			more, err = step(ctx)
			return err
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			logger.ErrorContext(ctx, where+" round failed", "err", err)
		}
		if err == nil && more {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Sleep waits for d or until ctx ends; it reports false then.
func Sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
