package fanout

import (
	"sync"
)

// OutboxAnalyzeRows is how many deliveries one process creates in a month
// partition before it first analyzes the partition; it analyzes it again each
// time its deliveries there have doubled since (2,000, 4,000, 8,000, 16,000),
// up to OutboxAnalyzeMaxRows, so the statistics keep up with a burst into a
// new partition, and autovacuum does the rest.
const OutboxAnalyzeRows = 1_000

// OutboxAnalyzeMaxRows is the last doubling at which the fan-out analyzes a
// month partition itself. By then the planner knows the partition holds
// thousands of rows, which is all the plans need (index probes, not scans);
// later growth is autovacuum's (its analyze follows every 10 % of the rows
// changed). Past it, no ANALYZE of a large partition — an ANALYZE samples up to
// 30,000 rows a table, a burst of a busy server's CPU — competes with the
// deliveries (issue 21: no ANALYZE burst on the hot path).
const OutboxAnalyzeMaxRows = 16_000

// outboxAnalyzer counts the deliveries (handed over or not) PostgresStore.CreateNotifications
// created per month partition, and says when a partition has grown enough
// since its last ANALYZE by this process that its statistics may be missing or
// stale. A burst into a partition autovacuum has not analyzed yet (its first
// look can be a minute away) leaves the planner thinking the partition nearly empty: the retrier's
// finish and target statements then join deliveries by a sequential scan.
type outboxAnalyzer struct {
	mu     sync.Mutex
	months map[string]*monthStats
}

type monthStats struct {
	created int // by this process, since it started
	next    int // created at which the month is analyzed next
}

// note adds the deliveries created per month ("200601") and returns the
// months to analyze now (storage.Postgres.AnalyzeOutboxMonth).
func (a *outboxAnalyzer) note(created map[string]int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.months == nil {
		a.months = map[string]*monthStats{}
	}
	var due []string
	for month, n := range created {
		m := a.months[month]
		if m == nil {
			m = &monthStats{next: OutboxAnalyzeRows}
			a.months[month] = m
		}
		m.created += n
		if m.created >= m.next && m.next <= OutboxAnalyzeMaxRows {
			m.next = 2 * m.created
			due = append(due, month)
		}
	}
	return due
}

// AnalyzeOutboxMonth analyzes the deliveries and notifications partitions of
// the month ("200601"), or the DEFAULT partitions where the month has none, and
// the month's delivery_attempts partition.
