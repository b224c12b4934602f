package webapi_test

import (
	"net/http"
	"testing"
)

// TestClientReportSettings: a client's weekly report is off in UTC until
// PATCH turns it on in a zone; each field left out is kept; a zone that is no
// IANA name, or a null, is a 422 naming the field.
func TestClientReportSettings(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})
	c := api.createClient("reported")
	path := "/v1/clients/" + c.ID
	type settings struct {
		Report struct {
			Weekly   bool   `json:"weekly"`
			Timezone string `json:"timezone"`
		} `json:"report"`
	}
	check := func(resp *response, weekly bool, tz string) {
		t.Helper()
		var got settings
		resp.expect(http.StatusOK).decode(&got)
		if got.Report.Weekly != weekly || got.Report.Timezone != tz {
			t.Fatalf("report = %+v; want weekly %v in %s", got.Report, weekly, tz)
		}
	}
	check(api.request("GET", path, nil), false, "UTC")
	check(api.request("PATCH", path, `{"report":{"weekly":true,"timezone":"Europe/Paris"}}`), true, "Europe/Paris")
	check(api.request("PATCH", path, `{"report":{"timezone":"America/New_York"}}`), true, "America/New_York")
	check(api.request("PATCH", path, `{"report":{"weekly":false}}`), false, "America/New_York")
	check(api.request("GET", path, nil), false, "America/New_York")
	for body, field := range map[string]string{
		`{"report":{"timezone":"Mars/Olympus"}}`: "report.timezone",
		`{"report":{"timezone":"Local"}}`:        "report.timezone",
		`{"report":{"timezone":""}}`:             "report.timezone",
		`{"report":{"timezone":null}}`:           "report.timezone",
		`{"report":{"weekly":null}}`:             "report.weekly",
		`{"report":null}`:                        "report",
	} {
		api.request("PATCH", path, body).expectInvalid(field)
	}
	check(api.request("GET", path, nil), false, "America/New_York")
}
