package console

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// maxFormBytes bounds a console form: a token, a CSRF token, an id.
const maxFormBytes = 16 << 10

// routes declares every console route. Pages are registered with the roles they
// admit: a member sees only its own inbox.
func (c *Console) routes() http.Handler {
	admin := []string{roleAdmin}
	anyone := []string{roleAdmin, roleMember}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /console/static/{file}", c.serveStatic)
	mux.HandleFunc("GET /console/login", c.loginPage)
	mux.HandleFunc("POST /console/login", c.login)
	mux.HandleFunc("POST /console/logout", c.page(anyone, c.logout))
	mux.HandleFunc("GET /console/{$}", c.page(anyone, c.home))
	mux.HandleFunc("GET /console/inbox", c.page([]string{roleMember}, c.inbox))
	mux.HandleFunc("POST /console/inbox/{id}/seen", c.page([]string{roleMember}, c.markSeen))
	mux.HandleFunc("GET /console/incidents", c.page([]string{roleMember}, c.memberIncidents))
	mux.HandleFunc("GET /console/incidents/{id}", c.page(anyone, c.incident))
	mux.HandleFunc("POST /console/incidents/{id}/ack", c.page([]string{roleMember}, c.actOnIncident("ack")))
	mux.HandleFunc("POST /console/incidents/{id}/resolve", c.page([]string{roleMember}, c.actOnIncident("resolve")))
	mux.HandleFunc("GET /console/clients/{id}/incidents", c.page(admin, c.clientIncidents))
	mux.HandleFunc("GET /console/sensors/{id}", c.page(admin, c.sensor))
	mux.HandleFunc("GET /console/history", c.page(admin, c.history))
	mux.HandleFunc("GET /console/history.csv", c.page(admin, c.historyCSV))
	mux.HandleFunc("GET /console/sites/{site}", c.page(admin, c.history))
	mux.HandleFunc("GET /console/sites/{site}/history.csv", c.page(admin, c.historyCSV))
	mux.HandleFunc("GET /console/clients", c.page(admin, c.clients))
	mux.HandleFunc("GET /console/clients/{id}", c.page(admin, c.client))
	mux.HandleFunc("POST /console/deliveries/{id}/redeliver", c.page(admin, c.redeliver))
	mux.HandleFunc("GET /console/live", c.page(admin, c.livePage))
	mux.HandleFunc("GET /console/live/events", c.page(admin, c.liveEvents))
	mux.HandleFunc("/console/", c.page(anyone, func(http.ResponseWriter, *http.Request, *session) error {
		return errorf(http.StatusNotFound, "There is no such page.")
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		}
		mux.ServeHTTP(w, r)
	})
}

// sensorIDPattern is DESIGN.md's sensor id; a prefix search takes 1 to 16 of the same.
var sensorIDPattern = regexp.MustCompile(`^[A-Za-z0-9]{1,16}$`)

// fleetData is the fleet page.
type fleetData struct {
	Online, Lost, Unknown, Registered int64
	// Estimated is true when Registered (and so Unknown) is Postgres' estimate.
	Estimated bool
	LostPage  []LostSensor
	NextLost  string
	Query     string
	QueryErr  string
	Results   []registry.Sensor
	// NextResult continues the search after the last result shown.
	NextResult string
}

// fleet shows the counts, the lost sensors and the search.
func (c *Console) fleet(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	q := r.URL.Query()
	var d fleetData
	if d.Query = strings.TrimSpace(q.Get("q")); d.Query != "" {
		if err := c.search(w, r, &d); err != nil || d.Query == "" {
			return err // a failure, or a redirect to the one match
		}
	}
	tracked, lost, err := c.deps.Heartbeat.CountHeartbeats(ctx)
	if err != nil {
		return err
	}
	registered, exact, err := c.deps.Registry.CountSensors(ctx)
	if err != nil {
		return err
	}
	d.Registered, d.Estimated = registered, !exact
	d.Online, d.Lost = tracked, lost
	d.Unknown = max(0, d.Registered-tracked-lost)

	lostPage, err := c.deps.Connections.LostSensors(ctx, storage.Page{After: q.Get("lost_after"), Limit: c.cfg.PageSize + 1})
	if err != nil {
		return err
	}
	d.LostPage, d.NextLost = pageOf(lostPage, c.cfg.PageSize, func(l LostSensor) string { return l.SensorID })
	c.render(w, r, http.StatusOK, "fleet", view{Title: "Fleet", Active: "fleet", Session: s, Data: d})
	return nil
}

// search fills in the sensors whose id starts with d.Query, or redirects to the
// sensor whose id is exactly it (clearing d.Query).
func (c *Console) search(w http.ResponseWriter, r *http.Request, d *fleetData) error {
	if !sensorIDPattern.MatchString(d.Query) {
		d.QueryErr = "A sensor id is 1 to 16 letters or digits."
		return nil
	}
	after := r.URL.Query().Get("after")
	if after == "" {
		_, err := c.deps.Registry.GetSensor(r.Context(), d.Query)
		if err == nil {
			http.Redirect(w, r, "/console/sensors/"+url.PathEscape(d.Query), http.StatusSeeOther)
			d.Query = ""
			return nil
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return err
		}
	}
	found, err := c.deps.Registry.SearchSensors(r.Context(), d.Query, storage.Page{After: after, Limit: c.cfg.PageSize + 1})
	if err != nil {
		return err
	}
	d.Results, d.NextResult = pageOf(found, c.cfg.PageSize, func(s registry.Sensor) string { return s.ID })
	if len(d.Results) == 0 {
		d.QueryErr = "No registered sensor id starts with " + d.Query + "."
	}
	return nil
}

// pageOf cuts a list fetched with one extra item to size, and returns the cursor of
// the next page (empty on the last).
func pageOf[T any](items []T, size int, key func(T) string) ([]T, string) {
	if len(items) <= size {
		return items, ""
	}
	return items[:size], key(items[size-1])
}

// sensorData is the sensor page.
type sensorData struct {
	Sensor     registry.Sensor
	LastSeen   time.Time
	Connection string
	Events     []storage.HistoryEvent
	Chart      chart
	// HistoryErr says why events and chart are missing (ClickHouse unreachable).
	HistoryErr string
	Clients    []registry.Client
	MoreClient bool
}

// sensorEventsShown and sensorEventsRange bound the latest events of a sensor.
const (
	sensorEventsShown = 20
	sensorEventsRange = 31 * 24 * time.Hour
)

// sensor shows one sensor: state, connection, latest events, changes per hour.
func (c *Console) sensor(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	id := r.PathValue("id")
	if !sensorIDPattern.MatchString(id) {
		return storage.ErrNotFound
	}
	var (
		d   sensorData
		err error
	)
	if d.Sensor, err = c.deps.Registry.GetSensor(ctx, id); err != nil {
		return err
	}
	if d.LastSeen, d.Connection, err = c.deps.Connections.Status(ctx, id); err != nil {
		return err
	}
	clients, err := c.deps.Registry.ListSensorClients(ctx, id, storage.Page{Limit: sensorEventsShown + 1})
	if err != nil {
		return err
	}
	d.Clients, d.MoreClient = clients[:min(len(clients), sensorEventsShown)], len(clients) > sensorEventsShown

	now := c.cfg.Now().UTC()
	from, to := chartRange(now)
	hours, err := c.deps.History.Summary(ctx, analytics.SummaryQuery{Scope: analytics.Scope{Kind: analytics.ScopeSensor, ID: id},
		From: from, To: to, Bucket: analytics.Bucket1h, Location: time.UTC})
	if err == nil {
		var page analytics.EventPage
		page, err = c.deps.History.SensorEvents(ctx, analytics.ListQuery{SensorID: id, From: now.Add(-sensorEventsRange),
			To: now.Add(time.Minute), Limit: sensorEventsShown})
		d.Events = page.Items
	}
	if err != nil {
		// The registry's view still helps when ClickHouse is down.
		c.logger.WarnContext(ctx, "console: sensor history unavailable", "sensor", id, "err", err)
		d.HistoryErr = "The history (ClickHouse) does not answer; events and the chart are missing."
	}
	d.Chart = changesChart(hours.Buckets, from)
	c.render(w, r, http.StatusOK, "sensor", view{Title: "Sensor " + id, Active: "fleet", Session: s, Data: d})
	return nil
}

// clientsData is the client list.
type clientsData struct {
	Clients []registry.Client
	Next    string
}

// clients lists the clients, a page at a time.
func (c *Console) clients(w http.ResponseWriter, r *http.Request, s *session) error {
	after := r.URL.Query().Get("after")
	if after != "" && uuid.Validate(after) != nil {
		return errorf(http.StatusBadRequest, "That is not a page of the client list.")
	}
	list, err := c.deps.Registry.ListClients(r.Context(), storage.Page{After: after, Limit: c.cfg.PageSize + 1})
	if err != nil {
		return err
	}
	var d clientsData
	d.Clients, d.Next = pageOf(list, c.cfg.PageSize, func(c registry.Client) string { return c.ID })
	c.render(w, r, http.StatusOK, "clients", view{Title: "Clients", Active: "clients", Session: s, Data: d})
	return nil
}

// clientData is the client page.
type clientData struct {
	Client registry.Client
	// Members is the first page of the client's members; MoreMembers says there
	// are more (the API lists them all).
	Members     []registry.Member
	MoreMembers bool
	Summary     storage.DeliverySummary
	Failed      []storage.Delivery
	NextFailed  string
}

// client shows a client's deliveries by state, its failing endpoints and its
// failed deliveries, each with a redeliver button.
func (c *Console) client(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	id := r.PathValue("id")
	after := r.URL.Query().Get("failed_after")
	if uuid.Validate(id) != nil || (after != "" && uuid.Validate(after) != nil) {
		return storage.ErrNotFound
	}
	var (
		d   clientData
		err error
	)
	if d.Client, err = c.deps.Registry.GetClient(ctx, id); err != nil {
		return err
	}
	if c.deps.Members != nil {
		members, err := c.deps.Members.ListClientMembers(ctx, id, storage.Page{Limit: c.cfg.PageSize + 1})
		if err != nil {
			return err
		}
		d.Members, d.MoreMembers = members[:min(len(members), c.cfg.PageSize)], len(members) > c.cfg.PageSize
	}
	since := c.cfg.Now().Add(-c.cfg.SummarySince)
	if d.Summary, err = c.deps.Deliveries.ClientDeliverySummary(ctx, id, since, c.cfg.SummaryWindow); err != nil {
		return err
	}
	failed, err := c.deps.Deliveries.ClientFailedDeliveries(ctx, id, storage.Page{After: after, Limit: c.cfg.PageSize + 1})
	if err != nil {
		return err
	}
	d.Failed, d.NextFailed = pageOf(failed, c.cfg.PageSize, func(d storage.Delivery) string { return d.ID })
	flash := ""
	switch q := r.URL.Query(); {
	case q.Get("redelivered") != "":
		flash = "Delivery " + q.Get("redelivered") + " is queued again."
	case q.Get("not_failed") != "":
		flash = "Delivery " + q.Get("not_failed") + " is no longer failed; nothing was changed."
	}
	c.render(w, r, http.StatusOK, "client", view{Title: d.Client.Name, Active: "clients", Session: s, Flash: flash, Data: d})
	return nil
}

// redeliver makes a failed delivery PENDING again and goes back to its client.
func (c *Console) redeliver(w http.ResponseWriter, r *http.Request, _ *session) error {
	id := r.PathValue("id")
	clientID := r.PostFormValue("client")
	if uuid.Validate(id) != nil || uuid.Validate(clientID) != nil {
		return storage.ErrNotFound
	}
	back := "/console/clients/" + clientID
	d, err := c.deps.Deliveries.RetryDelivery(r.Context(), id)
	switch {
	case errors.Is(err, storage.ErrConflict):
		http.Redirect(w, r, back+"?not_failed="+id, http.StatusSeeOther)
		return nil
	case err != nil:
		return err
	}
	c.logger.InfoContext(r.Context(), "console: delivery redelivered", "delivery", d.ID, "client", d.ClientID)
	http.Redirect(w, r, back+"?redelivered="+id, http.StatusSeeOther)
	return nil
}
