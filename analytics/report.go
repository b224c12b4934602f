package analytics

import (
	"context"
	"fmt"
	"time"
)

// ReportQuery asks for a client's report over [From, To), in Location.
type ReportQuery struct {
	ClientID string
	From, To time.Time
	Location *time.Location
}

// SiteOutage is an outage of a site with sensors of the client, overlapping
// the report's range.
type SiteOutage struct {
	Site      string
	StartedAt time.Time
	// RestoredAt is nil while the outage lasts.
	RestoredAt *time.Time
	// Sensors is how many sensors it covered.
	Sensors int
	// Seconds is how long it lasted inside the range (to now when open).
	Seconds int64
}

// Outages lists the outages of the sites of a client's sensors that overlap
// [from, to), oldest first.
type Outages interface {
	ClientSiteOutages(ctx context.Context, clientID string, from, to time.Time) ([]SiteOutage, error)
}

// WithOutages lets reports list site outages (the heartbeat keeps them in
// Postgres); without it they list none.
func WithOutages(o Outages) Option { return func(s *Store) { s.outages = o } }

// reportTop is how many sensors each of a report's rankings names.
const reportTop = 5

// Report is a client's figures over a range: the summary's total over the
// client's sensors, the sensors lost longest and unlocked longest, the site
// outages. Incidents (issue 23) do not exist yet: the list is always empty.
type Report struct {
	ClientID        string
	From, To        time.Time
	Location        *time.Location
	Sensors         int
	Total           Figures
	LostLongest     []TopItem
	UnlockedLongest []TopItem
	SiteOutages     []SiteOutage
}

// Report computes q's report. An unknown client is storage.ErrNotFound.
func (s *Store) Report(ctx context.Context, q ReportQuery) (Report, error) {
	scope := Scope{Kind: ScopeClient, ID: q.ClientID}
	out := Report{ClientID: q.ClientID, From: q.From.Truncate(time.Second), To: q.To.Truncate(time.Second), Location: q.Location}
	sum, err := s.summarize(ctx, scope, []time.Time{out.From, out.To})
	if err != nil {
		return Report{}, err
	}
	out.Sensors, out.Total = sum.Sensors, sum.Total
	for _, r := range []struct {
		by  string
		dst *[]TopItem
	}{{"lost_seconds", &out.LostLongest}, {"unlocked_seconds", &out.UnlockedLongest}} {
		items, err := s.Top(ctx, TopQuery{Scope: scope, From: out.From, To: out.To, By: r.by, Limit: reportTop})
		if err != nil {
			return Report{}, err
		}
		// A sensor that was never lost (or unlocked) is not among the longest.
		for _, it := range items {
			if it.Value > 0 {
				*r.dst = append(*r.dst, it)
			}
		}
	}
	if s.outages != nil {
		if out.SiteOutages, err = s.outages.ClientSiteOutages(ctx, q.ClientID, out.From, out.To); err != nil {
			return Report{}, fmt.Errorf("site outages of client %s: %w", q.ClientID, err)
		}
		now := s.now()
		for i, o := range out.SiteOutages {
			end := now
			if o.RestoredAt != nil {
				end = *o.RestoredAt
			}
			start := o.StartedAt
			if start.Before(out.From) {
				start = out.From
			}
			if end.After(out.To) {
				end = out.To
			}
			out.SiteOutages[i].Seconds = max(0, int64(end.Sub(start)/time.Second))
		}
	}
	return out, nil
}

// LastWeek is the week (Monday 00:00 to Monday 00:00 in loc) before the one
// now is in: a report's default range.
func LastWeek(now time.Time, loc *time.Location) (from, to time.Time) {
	local := now.In(loc)
	y, m, d := local.Date()
	back := (int(local.Weekday()) + 6) % 7
	to = time.Date(y, m, d-back, 0, 0, 0, 0, loc)
	return time.Date(y, m, d-back-7, 0, 0, 0, 0, loc), to
}
