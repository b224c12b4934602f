package webhook_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/webhook"
)

// Every event type reaches the receiver as the contract's body: its type, its
// severity (event's one definition), the client's seq, and for a site or
// maintenance event the site and the sensors it lists. One row per event type;
// a type without a row fails.
func TestBodyOfEveryEventType(t *testing.T) {
	t.Parallel()
	srv, got := recordingServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s := newSender(t, webhook.Config{AllowPrivate: true})
	secret := webhook.NewSecret()
	lost := []any{"s1", "s2", "s3"}
	cases := []struct {
		typ      event.Type
		data     *int
		site     bool
		severity string
	}{
		{event.StateChanged, intp(1), false, "info"},
		{event.ConnectionLost, intp(0), false, "critical"},
		{event.ConnectionLost, intp(1), false, "warning"},
		{event.ConnectionRestored, intp(1), false, "info"},
		{event.SensorOpenTooLong, intp(0), false, "critical"},
		{event.SiteOutage, nil, true, "warning"},
		{event.SiteRestored, nil, true, "info"},
		{event.MaintenanceEnded, nil, true, "info"},
		{event.MaintenanceEnded, nil, false, "info"},
		{event.SensorUnstable, intp(0), false, "info"},
		{event.SensorStable, intp(1), false, "info"},
	}
	covered := map[event.Type]bool{}
	for _, tc := range cases {
		covered[tc.typ] = true
	}
	for _, typ := range event.Types() {
		if !covered[typ] {
			t.Errorf("no case sends %s", typ)
		}
	}
	for i, tc := range cases {
		n := testNotification()
		n.Type, n.Data, n.Previous, n.Seq = tc.typ, tc.data, nil, int64(i+1)
		// A notification without a severity gets event's: the same as the
		// retrier sets.
		if got := webhook.NewBody(n).Severity; string(got) != tc.severity {
			t.Errorf("%s: NewBody without a severity gives %q, want %q", tc.typ, got, tc.severity)
		}
		n.Severity = event.SeverityOf(tc.typ, tc.data)
		if tc.site {
			n.SensorID, n.Site, n.Sensors = "s1", "Yard B", []string{"s1", "s2", "s3"}
		}
		if res := s.Send(t.Context(), webhook.Target{URL: srv.URL, Secret: secret}, n); res.Outcome != notifier.Sent {
			t.Fatalf("%s: result = %+v, want Sent", tc.typ, res)
		}
		req := <-got
		if err := webhook.Verify(secret, req.header, req.body, 0); err != nil {
			t.Errorf("%s: Verify: %v", tc.typ, err)
		}
		var body map[string]any
		if err := json.Unmarshal(req.body, &body); err != nil {
			t.Fatalf("%s: body is not JSON: %v: %s", tc.typ, err, req.body)
		}
		want := map[string]any{
			"id":       n.EventID,
			"type":     string(tc.typ),
			"sensor":   map[string]any{"id": n.SensorID, "address": n.SensorAddress},
			"data":     nil,
			"previous": nil,
			"at":       "2026-11-22T10:00:00Z",
			"severity": tc.severity,
			"seq":      float64(i + 1),
			"attempt":  3.0,
		}
		if tc.data != nil {
			want["data"] = float64(*tc.data)
		}
		if tc.site {
			want["site"], want["sensors"] = "Yard B", lost
		}
		if !reflect.DeepEqual(body, want) {
			t.Errorf("%s: body = %v\nwant      %v", tc.typ, body, want)
		}
	}
}

// A connection_restored's body says how long the sensor was lost: lost_since
// and silent_seconds; other bodies carry neither.
func TestRestoredBodyCarriesTheOutage(t *testing.T) {
	t.Parallel()
	n := testNotification()
	n.Type = event.ConnectionRestored
	since := n.At.Add(-(2*time.Hour + 14*time.Minute))
	n.LostSince = &since
	raw, err := json.Marshal(webhook.NewBody(n))
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	if body["lost_since"] != "2026-11-22T07:46:00Z" || body["silent_seconds"] != float64(8040) {
		t.Errorf("body %s: want lost_since 2026-11-22T07:46:00Z and silent_seconds 8040", raw)
	}
	n.Type, n.LostSince = event.StateChanged, nil
	if raw, _ := json.Marshal(webhook.NewBody(n)); strings.Contains(string(raw), "lost_since") || strings.Contains(string(raw), "silent_seconds") {
		t.Errorf("state_changed body %s carries an outage", raw)
	}
}

// An incident event's body names its incident (the id in its event id) and,
// for an incident_opened, the incident's severity; other events name none.
func TestBodyOfIncidentEvents(t *testing.T) {
	t.Parallel()
	const inc = "01a21ae4-2f20-7e01-8838-3623faa6ecea"
	for _, tc := range []struct {
		typ      event.Type
		data     *int
		severity event.Severity
	}{
		{event.IncidentOpened, intp(0), event.Critical},
		{event.IncidentOpened, nil, event.Warning},
		{event.IncidentAcknowledged, nil, event.Info},
		{event.IncidentResolved, nil, event.Info},
	} {
		n := testNotification()
		n.Type, n.Data, n.EventID = tc.typ, tc.data, event.IncidentEventID(inc, tc.typ)
		b := webhook.NewBody(n)
		if b.IncidentID != inc || b.Severity != tc.severity || b.ID != "incident:"+inc+":"+strings.TrimPrefix(string(tc.typ), "incident_") {
			t.Errorf("%s: body %+v, want incident %s, severity %s", tc.typ, b.ClientEvent, inc, tc.severity)
		}
	}
	if b := webhook.NewBody(testNotification()); b.IncidentID != "" {
		t.Errorf("a sensor event's body names incident %q", b.IncidentID)
	}
}
