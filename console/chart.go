package console

import (
	"fmt"
	"time"

	"github.com/lockstream/lockstream/analytics"
)

// The changes chart: one bar per hour over the last 7 days, drawn as SVG on the
// server (no script, nothing the Content-Security-Policy has to allow).
const (
	chartHours     = 7 * 24
	chartBarWidth  = 5
	chartHeight    = 120
	chartTopMargin = 14
	chartAxis      = 18
)

// chart is what the sensor template draws.
type chart struct {
	Width, Height int
	// Top is the y of the plot's top, Plot of its baseline, LabelY of the day labels.
	Top, Plot, LabelY int
	Bars              []chartBar
	Days              []chartTick
	Max               int
	Total             int
}

// chartBar is one hour.
type chartBar struct {
	X, Y, W, H int
	Title      string
	Count      int
}

// chartTick labels the start of a day (UTC).
type chartTick struct {
	X     int
	Label string
}

// chartRange is the 7 days of hours ending with the current one.
func chartRange(now time.Time) (from, to time.Time) {
	to = now.UTC().Truncate(time.Hour).Add(time.Hour)
	return to.Add(-chartHours * time.Hour), to
}

// changesChart lays out the changes of hourly buckets (analytics' summary of
// the sensor, the API's figures) from from on.
func changesChart(buckets []analytics.Figures, from time.Time) chart {
	byHour := make(map[int64]int, len(buckets))
	ch := chart{Width: chartHours * chartBarWidth, Height: chartTopMargin + chartHeight + chartAxis,
		Top: chartTopMargin, Plot: chartTopMargin + chartHeight, LabelY: chartTopMargin + chartHeight + chartAxis - 4, Max: 1}
	for _, b := range buckets {
		byHour[b.Start.Unix()] += int(b.Changes)
		ch.Total += int(b.Changes)
		ch.Max = max(ch.Max, byHour[b.Start.Unix()])
	}
	for i := range chartHours {
		hour := from.Add(time.Duration(i) * time.Hour)
		n := byHour[hour.Unix()]
		h := n * chartHeight / ch.Max
		if n > 0 {
			h = max(h, 2) // a single change stays visible next to a busy hour
		}
		x := i * chartBarWidth
		ch.Bars = append(ch.Bars, chartBar{X: x, Y: ch.Plot - h, W: chartBarWidth - 1, H: h, Count: n,
			Title: fmt.Sprintf("%s: %d change%s", hour.Format("Mon 2 Jan 15:00 UTC"), n, plural(n))})
		if hour.Hour() == 0 {
			ch.Days = append(ch.Days, chartTick{X: x, Label: hour.Format("Mon 2 Jan")})
		}
	}
	return ch
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
