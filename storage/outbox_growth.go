package storage

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// OutboxAnalyzeRows is how many outbox rows one process puts in a month
// partition before it first has the month analyzed (Postgres.AnalyzeOutboxMonth);
// it has it analyzed again each time they have doubled since (2,000, 4,000,
// 8,000, 16,000), up to OutboxAnalyzeMaxRows, so the statistics keep up with a
// burst into a new partition, and autovacuum does the rest.
const OutboxAnalyzeRows = 1_000

// OutboxAnalyzeMaxRows is the last doubling at which a process has a month
// analyzed itself. By then the planner knows the partition holds thousands of
// rows, which is all the plans need (index probes, not scans); later growth is
// autovacuum's (its analyze follows every 10 % of the rows changed). Past it,
// no ANALYZE of a large partition — an ANALYZE samples up to 30,000 rows a
// table, a burst of a busy server's CPU — competes with the deliveries (issue
// 21: no ANALYZE burst on the hot path).
const OutboxAnalyzeMaxRows = 16_000

// OutboxGrowth counts the outbox rows a process wrote per month partition and
// says when a month has grown enough since its last ANALYZE that its
// statistics may be missing or stale. A burst into a partition autovacuum has
// not analyzed yet (its first look can be a minute away) leaves the planner
// thinking the partition nearly empty, and the hot statements then probe it by
// sequential scan. Two writers fill the outbox: the fan-out (notifications,
// deliveries) and the outcome write (the delivery rows of handed-over webhooks
// that failed); each keeps its own. The zero value is ready to use.
type OutboxGrowth struct {
	mu     sync.Mutex
	months map[string]*monthGrowth
}

type monthGrowth struct {
	rows int // written by this process, since it started
	next int // rows at which the month is analyzed next
}

// Note adds the rows written per month ("200601") and returns the months to
// analyze now.
func (g *OutboxGrowth) Note(rows map[string]int) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.months == nil {
		g.months = map[string]*monthGrowth{}
	}
	var due []string
	for month, n := range rows {
		m := g.months[month]
		if m == nil {
			m = &monthGrowth{next: OutboxAnalyzeRows}
			g.months[month] = m
		}
		m.rows += n
		if m.rows >= m.next && m.next <= OutboxAnalyzeMaxRows {
			m.next = 2 * m.rows
			due = append(due, month)
		}
	}
	return due
}

// QueueAnalyses puts months on due for AnalyzeMonths without waiting: when due
// is full, analyses are queued already, and a later doubling asks again.
func QueueAnalyses(due chan<- string, months []string) {
	for _, month := range months {
		select {
		case due <- month:
		default:
		}
	}
}

// AnalyzeMonths analyzes the months that come on due (Postgres.AnalyzeOutboxMonth
// as analyze), one at a time and each within timeout, until ctx ends: off the
// path of the writer that found them due, since an ANALYZE takes tens of
// milliseconds. A failure is logged; autovacuum analyzes later.
func AnalyzeMonths(ctx context.Context, due <-chan string, analyze func(context.Context, string) error,
	timeout time.Duration, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case month := <-due:
			actx, cancel := context.WithTimeout(ctx, timeout)
			if err := analyze(actx, month); err != nil && ctx.Err() == nil {
				logger.WarnContext(ctx, "refreshing the outbox statistics after a burst failed; autovacuum will",
					"month", month, "err", err)
			}
			cancel()
		}
	}
}
