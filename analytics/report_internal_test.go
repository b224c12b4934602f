package analytics

import (
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/domain"
)

// TestReportIncidentSecondsAndMail: an incident's seconds are the part of it
// unresolved inside the range (to now while open), and both parts of the
// report mail list it in words.
func TestReportIncidentSecondsAndMail(t *testing.T) {
	from := time.Date(2026, 11, 16, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 0, 7)
	now := to.Add(3 * time.Hour)
	acked, resolved := from.Add(2*time.Hour), from.Add(3*time.Hour)
	for _, c := range []struct {
		name     string
		start    time.Time
		end      *time.Time
		now      time.Time
		want     int64
		wantText string
	}{
		{"before the range, resolved inside", from.Add(-time.Hour), &resolved, now, 3 * 3600, "resolved Mon 16 Nov 03:00"},
		{"inside, still open after it", to.Add(-30 * time.Minute), nil, now, 1800, "still unresolved"},
		{"open, the range not over", to.Add(-30 * time.Minute), nil, to.Add(-10 * time.Minute), 1200, "still unresolved"},
	} {
		if got := secondsInside(c.start, c.end, from, to, c.now); got != c.want {
			t.Errorf("%s: %d s, want %d", c.name, got, c.want)
		}
		rep := Report{ClientID: "c1", From: from, To: to, Location: time.UTC, Incidents: []ReportIncident{{
			Incident: domain.Incident{Subject: "sensor:door1", Severity: "critical", State: "resolved", OpenedAt: c.start,
				AcknowledgedAt: &acked, ResolvedAt: c.end},
			Seconds: c.want}}}
		templates, err := NewMailTemplates()
		if err != nil {
			t.Fatal(err)
		}
		mail, err := templates.Render(rep, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		line := "critical sensor:door1: opened " + c.start.Format("Mon 2 Jan 15:04") + ", acknowledged Mon 16 Nov 02:00, " +
			c.wantText + "; " + Duration(c.want) + " unresolved in the week"
		if !strings.Contains(mail.Text, line) || !strings.Contains(mail.HTML, line) {
			t.Errorf("%s: the mail lacks %q:\n%s\n%s", c.name, line, mail.Text, mail.HTML)
		}
	}
}
