package console

import (
	"testing"
	"time"

	"github.com/lockstream/lockstream/analytics"
)

func TestChangesChartLaysOutAWeekOfHours(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 30, 0, 0, time.UTC)
	from, to := chartRange(now)
	if to != time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC) || to.Sub(from) != 7*24*time.Hour {
		t.Fatalf("range %s to %s", from, to)
	}
	ch := changesChart([]analytics.Figures{{Start: from, Changes: 8}, {Start: to.Add(-time.Hour), Changes: 1}}, from)
	if len(ch.Bars) != chartHours || ch.Total != 9 || ch.Max != 8 || len(ch.Days) != 7 {
		t.Fatalf("chart: %d bars, total %d, max %d, %d days", len(ch.Bars), ch.Total, ch.Max, len(ch.Days))
	}
	first, last := ch.Bars[0], ch.Bars[chartHours-1]
	if first.H != chartHeight || first.Y != ch.Top || last.H != chartHeight/8 || last.Y != ch.Plot-chartHeight/8 || last.Count != 1 || ch.Bars[1].H != 0 {
		t.Fatalf("bars: first %+v, last %+v, second %+v", first, last, ch.Bars[1])
	}
	if last.Title != "Sun 22 Nov 10:00 UTC: 1 change" {
		t.Fatalf("title %q", last.Title)
	}
}
