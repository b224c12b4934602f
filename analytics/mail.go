package analytics

import (
	"bytes"
	"embed"
	"fmt"
	htmltemplate "html/template"
	"strings"
	texttemplate "text/template"
	"time"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

// ReportMail is a report rendered as an email.
type ReportMail struct {
	Subject, Text, HTML string
}

// reportView is what the report templates see: every figure already in words.
type reportView struct {
	ClientID, ClientName, Period, TZ string
	FromRFC3339, ToRFC3339           string
	Sensors                          int
	Availability                     string
	Readings, Changes, Unlocks       int64
	Losses, Restores                 int64
	Unlocked, Lost, MeanRestore      string
	LostLongest, UnlockedLongest     []rankedView
	SiteOutages                      []outageView
	Incidents                        []incidentView
}

type rankedView struct {
	SensorID, Duration string
}

type incidentView struct {
	Subject, Severity, State, Opened, Ended, Duration, Acknowledged string
}

type outageView struct {
	Site, Started, Ended, Duration string
	Sensors                        int
}

// MailTemplates renders reports as emails. Create it with NewMailTemplates;
// it is safe for concurrent use.
type MailTemplates struct {
	text *texttemplate.Template
	html *htmltemplate.Template
}

// NewMailTemplates parses the report's templates.
func NewMailTemplates() (*MailTemplates, error) {
	text, err := texttemplate.ParseFS(templateFS, "templates/report_text.tmpl")
	if err != nil {
		return nil, fmt.Errorf("parsing the report's text template: %w", err)
	}
	html, err := htmltemplate.ParseFS(templateFS, "templates/report_html.tmpl")
	if err != nil {
		return nil, fmt.Errorf("parsing the report's HTML template: %w", err)
	}
	return &MailTemplates{text: text, html: html}, nil
}

// Render renders rep, the report of the client named clientName, as a text
// and an HTML body that say the same figures as GET /v1/clients/{id}/report
// for its range: counts as they are, durations in words with their exact
// seconds, availability as a percentage to four decimals.
func (m *MailTemplates) Render(rep Report, clientName string) (ReportMail, error) {
	loc := rep.Location
	if loc == nil {
		loc = time.UTC
	}
	from, to := rep.From.In(loc), rep.To.In(loc)
	v := reportView{ClientID: rep.ClientID, ClientName: clientName, TZ: loc.String(),
		Period:      from.Format("Mon 2 Jan 2006 15:04") + " to " + to.Format("Mon 2 Jan 2006 15:04"),
		FromRFC3339: rep.From.UTC().Format(time.RFC3339), ToRFC3339: rep.To.UTC().Format(time.RFC3339),
		Sensors: rep.Sensors, Availability: Percent(rep.Total.Availability),
		Readings: rep.Total.Readings, Changes: rep.Total.Changes, Unlocks: rep.Total.Unlocks,
		Losses: rep.Total.Losses, Restores: rep.Total.Restores,
		Unlocked: Duration(rep.Total.UnlockedSeconds), Lost: Duration(rep.Total.LostSeconds), MeanRestore: "none restored"}
	if mean := rep.Total.MeanRestoreSeconds; mean != nil {
		v.MeanRestore = Duration(int64(*mean + 0.5))
	}
	for _, it := range rep.LostLongest {
		v.LostLongest = append(v.LostLongest, rankedView{SensorID: it.SensorID, Duration: Duration(it.Value)})
	}
	for _, it := range rep.UnlockedLongest {
		v.UnlockedLongest = append(v.UnlockedLongest, rankedView{SensorID: it.SensorID, Duration: Duration(it.Value)})
	}
	const at = "Mon 2 Jan 15:04"
	for _, o := range rep.SiteOutages {
		ov := outageView{Site: o.Site, Started: o.StartedAt.In(loc).Format(at), Ended: "still out",
			Duration: Duration(o.Seconds), Sensors: o.Sensors}
		if o.RestoredAt != nil {
			ov.Ended = o.RestoredAt.In(loc).Format(at)
		}
		v.SiteOutages = append(v.SiteOutages, ov)
	}
	v.Incidents = incidentViews(rep.Incidents, loc)
	var text, html bytes.Buffer
	if err := m.text.ExecuteTemplate(&text, "report.text", v); err != nil {
		return ReportMail{}, fmt.Errorf("rendering the report's text: %w", err)
	}
	if err := m.html.ExecuteTemplate(&html, "report.html", v); err != nil {
		return ReportMail{}, fmt.Errorf("rendering the report's HTML: %w", err)
	}
	subject := fmt.Sprintf("lockstream weekly report for %s, %s to %s: availability %s",
		clientName, from.Format("2 Jan"), to.Format("2 Jan 2006"), v.Availability)
	return ReportMail{Subject: subject, Text: text.String(), HTML: html.String()}, nil
}

// incidentViews says each incident in words: what it was about, when it
// opened and ended (or that it is still unresolved), whether and when it was
// acknowledged, and how long it was unresolved in the report's range.
func incidentViews(incidents []ReportIncident, loc *time.Location) []incidentView {
	const at = "Mon 2 Jan 15:04"
	var out []incidentView
	for _, inc := range incidents {
		iv := incidentView{Subject: inc.Subject, Severity: inc.Severity, State: inc.State,
			Opened: inc.OpenedAt.In(loc).Format(at), Ended: "still unresolved", Duration: Duration(inc.Seconds),
			Acknowledged: "not acknowledged"}
		if inc.ResolvedAt != nil {
			iv.Ended = "resolved " + inc.ResolvedAt.In(loc).Format(at)
		}
		if inc.AcknowledgedAt != nil {
			iv.Acknowledged = "acknowledged " + inc.AcknowledgedAt.In(loc).Format(at)
		}
		out = append(out, iv)
	}
	return out
}

// Percent writes an availability as a percentage to four decimals ("n/a"
// for none: a client without sensors).
func Percent(a *float64) string {
	if a == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.4f %%", 100**a)
}

// Duration writes seconds in words with the exact count: "1 d 2 h 3 min 4 s
// (93784 s)", "0 s".
func Duration(seconds int64) string {
	if seconds == 0 {
		return "0 s"
	}
	var parts []string
	rest := seconds
	for _, u := range []struct {
		name string
		size int64
	}{{"d", 86400}, {"h", 3600}, {"min", 60}, {"s", 1}} {
		if n := rest / u.size; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, u.name))
			rest -= n * u.size
		}
	}
	if seconds < 60 {
		return strings.Join(parts, " ")
	}
	return fmt.Sprintf("%s (%d s)", strings.Join(parts, " "), seconds)
}
