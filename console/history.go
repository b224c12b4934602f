package console

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/lockstream/lockstream/analytics"
)

// historyDays is how many days the site and fleet pages show, today's
// included.
const historyDays = 30

// sitePattern is DESIGN.md's site name.
var sitePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// historyData is a site's or the fleet's days: availability and time
// unlocked per day (the API's summary, in UTC days), newest first.
type historyData struct {
	Name    string
	Sensors int
	Days    []historyDay
	Total   historyDay
	// CSV is the download of the same days, as the API's CSV.
	CSV string
}

type historyDay struct {
	Day          string
	Availability string
	Unlocked     string
	Lost         string
	Losses       int64
	Changes      int64
}

// historyScope is the page's scope: the fleet, or the site in the path.
func historyScope(r *http.Request) (analytics.Scope, string, error) {
	site := r.PathValue("site")
	if site == "" {
		return analytics.Scope{Kind: analytics.ScopeFleet}, "/console/history.csv", nil
	}
	if !sitePattern.MatchString(site) {
		return analytics.Scope{}, "", errorf(http.StatusNotFound, "There is no such site.")
	}
	return analytics.Scope{Kind: analytics.ScopeSite, ID: site}, "/console/sites/" + url.PathEscape(site) + "/history.csv", nil
}

// historyRange is the last historyDays UTC days, today's included.
func historyRange(now time.Time) (from, to time.Time) {
	to = now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	return to.AddDate(0, 0, -historyDays), to
}

// history shows a site's or the fleet's days.
func (c *Console) history(w http.ResponseWriter, r *http.Request, s *session) error {
	scope, csvLink, err := historyScope(r)
	if err != nil {
		return err
	}
	from, to := historyRange(c.cfg.Now())
	sum, err := c.deps.History.Summary(r.Context(), analytics.SummaryQuery{Scope: scope, From: from, To: to,
		Bucket: analytics.Bucket1d, Location: time.UTC})
	if err != nil {
		return err
	}
	d := historyData{Name: "Fleet", Sensors: sum.Sensors, CSV: csvLink, Total: dayOf(sum.Total, "All 30 days")}
	if scope.Kind == analytics.ScopeSite {
		d.Name = "Site " + scope.ID
	}
	for i := len(sum.Buckets) - 1; i >= 0; i-- {
		b := sum.Buckets[i]
		d.Days = append(d.Days, dayOf(b, b.Start.UTC().Format("Mon 2 Jan 2006")))
	}
	c.render(w, r, http.StatusOK, "history", view{Title: d.Name + ": days", Active: "fleet", Session: s, Data: d})
	return nil
}

func dayOf(f analytics.Figures, label string) historyDay {
	d := historyDay{Day: label, Availability: "—", Unlocked: hours(f.UnlockedSeconds), Lost: hours(f.LostSeconds),
		Losses: f.Losses, Changes: f.Changes}
	if f.Availability != nil {
		d.Availability = fmt.Sprintf("%.3f %%", 100**f.Availability)
	}
	return d
}

// hours writes seconds as h:mm.
func hours(s int64) string {
	return fmt.Sprintf("%d:%02d", s/3600, s%3600/60)
}

// historyCSV downloads the page's days as the API's CSV.
func (c *Console) historyCSV(w http.ResponseWriter, r *http.Request, _ *session) error {
	scope, _, err := historyScope(r)
	if err != nil {
		return err
	}
	from, to := historyRange(c.cfg.Now())
	sum, err := c.deps.History.Summary(r.Context(), analytics.SummaryQuery{Scope: scope, From: from, To: to,
		Bucket: analytics.Bucket1d, Location: time.UTC})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="days.csv"`)
	return analytics.WriteCSV(w, sum)
}
