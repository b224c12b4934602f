package webapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/storage"
)

// Analytics is the part of analytics.Store the analytics routes read.
type Analytics interface {
	Summary(ctx context.Context, q analytics.SummaryQuery) (analytics.Summary, error)
	Top(ctx context.Context, q analytics.TopQuery) ([]analytics.TopItem, error)
	Export(ctx context.Context, q analytics.ExportQuery, row func(analytics.ExportRow) error) error
	Report(ctx context.Context, q analytics.ReportQuery) (analytics.Report, error)
}

// WithAnalytics serves GET /v1/analytics/summary, /top, /export and the
// clients' reports from a. Without it they answer 503.
func WithAnalytics(a Analytics) Option {
	return func(s *Server) { s.analytics = a }
}

// defaultTop is a top list's length when limit is left out.
const defaultTop = 20

// analyticsQuery is what every analytics route shares: ?scope=&from=&to=&tz=.
type analyticsQuery struct {
	scope    analytics.Scope
	from, to time.Time
	loc      *time.Location
}

// parseAnalyticsQuery reads scope (required unless scope is given), from and
// to (RFC 3339; to defaults to now, from to 24 hours before to; no longest
// range) and tz (an IANA name, default UTC). Each bad value is a 400 naming
// its parameter.
func (s *Server) parseAnalyticsQuery(r *http.Request, scope *analytics.Scope) (analyticsQuery, error) {
	if s.analytics == nil {
		return analyticsQuery{}, unavailable("analytics are disabled: the server has no ClickHouse store")
	}
	values := r.URL.Query()
	var q analyticsQuery
	if scope != nil {
		q.scope = *scope
	} else {
		raw := values.Get("scope")
		if raw == "" {
			return analyticsQuery{}, httpapi.InvalidParameter("scope is required: sensor:<id>, site:<site>, client:<client id> or fleet")
		}
		sc, err := analytics.ParseScope(raw)
		if err != nil {
			return analyticsQuery{}, httpapi.InvalidParameter("%v", err)
		}
		q.scope = sc
	}
	rq, err := parseRangeQuery(r, s.cfg.Now(), noLongestRange)
	if err != nil {
		return analyticsQuery{}, err
	}
	q.from, q.to = rq.from, rq.to
	q.loc = time.UTC
	if raw := values.Get("tz"); raw != "" {
		if q.loc, err = time.LoadLocation(raw); err != nil || raw == "Local" {
			return analyticsQuery{}, httpapi.InvalidParameter("tz must be an IANA time zone such as Europe/Paris, got %q", raw)
		}
	}
	return q, nil
}

// parseFormat reads format: one of allowed, the first by default.
func parseFormat(r *http.Request, allowed ...string) (string, error) {
	raw := r.URL.Query().Get("format")
	if raw == "" {
		return allowed[0], nil
	}
	for _, a := range allowed {
		if raw == a {
			return raw, nil
		}
	}
	return "", httpapi.InvalidParameter("format must be one of %v, got %q", allowed, raw)
}

// analyticsError maps the analytics' errors: a query it refuses is a 400
// naming the parameter, an unknown scope a 404.
func analyticsError(scope analytics.Scope, err error) error {
	switch {
	case errors.Is(err, analytics.ErrBadQuery):
		return httpapi.InvalidParameter("%v", err)
	case errors.Is(err, storage.ErrNotFound):
		return httpapi.NotFound("%s not found", scope)
	}
	return fmt.Errorf("analytics of %s: %w", scope, err)
}

// figuresBody is a bucket as the API shows it.
type figuresBody struct {
	Start              time.Time `json:"start"`
	End                time.Time `json:"end"`
	Readings           int64     `json:"readings"`
	Changes            int64     `json:"changes"`
	Unlocks            int64     `json:"unlocks"`
	UnlockedSeconds    int64     `json:"unlocked_seconds"`
	Losses             int64     `json:"losses"`
	LostSeconds        int64     `json:"lost_seconds"`
	Restores           int64     `json:"restores"`
	MeanRestoreSeconds *float64  `json:"mean_restore_seconds"`
	Availability       *float64  `json:"availability"`
}

func renderFigures(f analytics.Figures, loc *time.Location) figuresBody {
	return figuresBody{Start: f.Start.In(loc), End: f.End.In(loc), Readings: f.Readings, Changes: f.Changes, Unlocks: f.Unlocks,
		UnlockedSeconds: f.UnlockedSeconds, Losses: f.Losses, LostSeconds: f.LostSeconds, Restores: f.Restores,
		MeanRestoreSeconds: f.MeanRestoreSeconds, Availability: f.Availability}
}

// summaryBody is GET /v1/analytics/summary's answer.
type summaryBody struct {
	Scope   string        `json:"scope"`
	From    time.Time     `json:"from"`
	To      time.Time     `json:"to"`
	Bucket  string        `json:"bucket"`
	TZ      string        `json:"tz"`
	Sensors int           `json:"sensors"`
	Buckets []figuresBody `json:"buckets"`
	Total   figuresBody   `json:"total"`
}

// analyticsSummary handles GET /v1/analytics/summary.
func (s *Server) analyticsSummary(w http.ResponseWriter, r *http.Request) error {
	q, err := s.parseAnalyticsQuery(r, nil)
	if err != nil {
		return err
	}
	bucket := analytics.Bucket1h
	if raw := r.URL.Query().Get("bucket"); raw != "" {
		if bucket, err = analytics.ParseBucket(raw); err != nil {
			return httpapi.InvalidParameter("%v", err)
		}
	}
	format, err := parseFormat(r, "json", "csv")
	if err != nil {
		return err
	}
	sum, err := s.analytics.Summary(r.Context(), analytics.SummaryQuery{Scope: q.scope, From: q.from, To: q.to, Bucket: bucket, Location: q.loc})
	if err != nil {
		return analyticsError(q.scope, err)
	}
	body := summaryBody{Scope: q.scope.String(), From: sum.From.In(q.loc), To: sum.To.In(q.loc), Bucket: string(bucket),
		TZ: q.loc.String(), Sensors: sum.Sensors, Buckets: make([]figuresBody, len(sum.Buckets)), Total: renderFigures(sum.Total, q.loc)}
	for i, b := range sum.Buckets {
		body.Buckets[i] = renderFigures(b, q.loc)
	}
	if format == "json" {
		return httpapi.WriteJSON(w, http.StatusOK, body)
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="summary.csv"`)
	sum.Location = q.loc
	return analytics.WriteCSV(w, sum)
}

// topBody is GET /v1/analytics/top's answer.
type topBody struct {
	By    string     `json:"by"`
	Items []topEntry `json:"items"`
}

type topEntry struct {
	SensorID string `json:"sensor_id"`
	Value    int64  `json:"value"`
}

// analyticsTop handles GET /v1/analytics/top.
func (s *Server) analyticsTop(w http.ResponseWriter, r *http.Request) error {
	q, err := s.parseAnalyticsQuery(r, nil)
	if err != nil {
		return err
	}
	values := r.URL.Query()
	by := values.Get("by")
	if by == "" {
		return httpapi.InvalidParameter("by is required: changes, unlocks, unlocked_seconds, losses or lost_seconds")
	}
	if err := analytics.ParseBy(by); err != nil {
		return httpapi.InvalidParameter("%v", err)
	}
	limit := defaultTop
	if raw := values.Get("limit"); raw != "" {
		if limit, err = strconv.Atoi(raw); err != nil || limit < 1 || limit > analytics.MaxTop {
			return httpapi.InvalidParameter("limit must be an integer from 1 to %d, got %q", analytics.MaxTop, raw)
		}
	}
	items, err := s.analytics.Top(r.Context(), analytics.TopQuery{Scope: q.scope, From: q.from, To: q.to, By: by, Limit: limit})
	if err != nil {
		return analyticsError(q.scope, err)
	}
	body := topBody{By: by, Items: make([]topEntry, len(items))}
	for i, it := range items {
		body.Items[i] = topEntry{SensorID: it.SensorID, Value: it.Value}
	}
	return httpapi.WriteJSON(w, http.StatusOK, body)
}

// reportBody is GET /v1/clients/{id}/report's answer.
type reportBody struct {
	ClientID        string               `json:"client_id"`
	From            time.Time            `json:"from"`
	To              time.Time            `json:"to"`
	TZ              string               `json:"tz"`
	Sensors         int                  `json:"sensors"`
	Total           figuresBody          `json:"total"`
	LostLongest     []topEntry           `json:"lost_longest"`
	UnlockedLongest []topEntry           `json:"unlocked_longest"`
	SiteOutages     []siteOutageBody     `json:"site_outages"`
	Incidents       []reportIncidentBody `json:"incidents"`
}

// reportIncidentBody is an incident of a report: the incident as GET
// /v1/incidents/{id} shows it (without its timeline) and how long it was
// unresolved inside the range.
type reportIncidentBody struct {
	incidentBody
	Seconds int64 `json:"seconds"`
}

type siteOutageBody struct {
	Site       string     `json:"site"`
	StartedAt  time.Time  `json:"started_at"`
	RestoredAt *time.Time `json:"restored_at"`
	Sensors    int        `json:"sensors"`
	Seconds    int64      `json:"seconds"`
}

// clientReport handles GET /v1/clients/{id}/report: the client's figures over
// from–to (by default the last whole week, Monday to Monday in tz).
func (s *Server) clientReport(w http.ResponseWriter, r *http.Request) error {
	id, err := clientFromPath(r)
	if err != nil {
		return err
	}
	scope := analytics.Scope{Kind: analytics.ScopeClient, ID: id}
	q, err := s.parseAnalyticsQuery(r, &scope)
	if err != nil {
		return err
	}
	if values := r.URL.Query(); values.Get("from") == "" && values.Get("to") == "" {
		q.from, q.to = analytics.LastWeek(s.cfg.Now(), q.loc)
	}
	rep, err := s.analytics.Report(r.Context(), analytics.ReportQuery{ClientID: id, From: q.from, To: q.to, Location: q.loc})
	if err != nil {
		return analyticsError(scope, err)
	}
	return httpapi.WriteJSON(w, http.StatusOK, renderReport(rep, s.cfg.Now()))
}

func renderReport(rep analytics.Report, now time.Time) reportBody {
	loc := rep.Location
	body := reportBody{ClientID: rep.ClientID, From: rep.From.In(loc), To: rep.To.In(loc), TZ: loc.String(), Sensors: rep.Sensors,
		Total: renderFigures(rep.Total, loc), LostLongest: []topEntry{}, UnlockedLongest: []topEntry{},
		SiteOutages: []siteOutageBody{}, Incidents: []reportIncidentBody{}}
	for _, it := range rep.LostLongest {
		body.LostLongest = append(body.LostLongest, topEntry{SensorID: it.SensorID, Value: it.Value})
	}
	for _, it := range rep.UnlockedLongest {
		body.UnlockedLongest = append(body.UnlockedLongest, topEntry{SensorID: it.SensorID, Value: it.Value})
	}
	for _, o := range rep.SiteOutages {
		body.SiteOutages = append(body.SiteOutages, siteOutageBody{Site: o.Site, StartedAt: o.StartedAt.In(loc),
			RestoredAt: o.RestoredAt, Sensors: o.Sensors, Seconds: o.Seconds})
	}
	for _, inc := range rep.Incidents {
		body.Incidents = append(body.Incidents, reportIncidentBody{incidentBody: renderIncident(inc.Incident, now),
			Seconds: inc.Seconds})
	}
	return body
}
