package analytics

import (
	"context"
	"fmt"
	"time"

	"github.com/lockstream/lockstream/domain"
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

// Incidents lists a client's incidents open at some time in [from, to),
// oldest first (the incident box keeps them in Postgres).
type Incidents interface {
	ClientIncidents(ctx context.Context, clientID string, from, to time.Time) ([]domain.Incident, error)
}

// WithIncidents lets reports list incidents; without it they list none.
func WithIncidents(i Incidents) Option { return func(s *Store) { s.incidents = i } }

// ReportIncident is an incident of a report, with how long it was open
// (unresolved) inside the report's range: to now while it is.
type ReportIncident struct {
	domain.Incident
	Seconds int64
}

// reportTop is how many sensors each of a report's rankings names.
const reportTop = 5

// Report is a client's figures over a range: the summary's total over the
// client's sensors, the sensors lost longest and unlocked longest, the site
// outages, the incidents open at some time in the range.
type Report struct {
	ClientID        string
	From, To        time.Time
	Location        *time.Location
	Sensors         int
	Total           Figures
	LostLongest     []TopItem
	UnlockedLongest []TopItem
	SiteOutages     []SiteOutage
	Incidents       []ReportIncident
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
	if err := s.reportOutages(ctx, &out); err != nil {
		return Report{}, err
	}
	if err := s.reportIncidents(ctx, &out); err != nil {
		return Report{}, err
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

// reportOutages adds the site outages of out's client, each with its
// seconds inside the range.
func (s *Store) reportOutages(ctx context.Context, out *Report) error {
	if s.outages == nil {
		return nil
	}
	outages, err := s.outages.ClientSiteOutages(ctx, out.ClientID, out.From, out.To)
	if err != nil {
		return fmt.Errorf("site outages of client %s: %w", out.ClientID, err)
	}
	now := s.now()
	for i, o := range outages {
		outages[i].Seconds = secondsInside(o.StartedAt, o.RestoredAt, out.From, out.To, now)
	}
	out.SiteOutages = outages
	return nil
}

// reportIncidents adds the incidents of out's client open in its range, each
// with its seconds inside it.
func (s *Store) reportIncidents(ctx context.Context, out *Report) error {
	if s.incidents == nil {
		return nil
	}
	incidents, err := s.incidents.ClientIncidents(ctx, out.ClientID, out.From, out.To)
	if err != nil {
		return fmt.Errorf("incidents of client %s: %w", out.ClientID, err)
	}
	now := s.now()
	for _, inc := range incidents {
		out.Incidents = append(out.Incidents, ReportIncident{Incident: inc,
			Seconds: secondsInside(inc.OpenedAt, inc.ResolvedAt, out.From, out.To, now)})
	}
	return nil
}

// secondsInside is how much of [start, end) — end nil: until now — lies in
// [from, to), in whole seconds.
func secondsInside(start time.Time, end *time.Time, from, to, now time.Time) int64 {
	stop := now
	if end != nil {
		stop = *end
	}
	if start.Before(from) {
		start = from
	}
	if stop.After(to) {
		stop = to
	}
	return max(0, int64(stop.Sub(start)/time.Second))
}
