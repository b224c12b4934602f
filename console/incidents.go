package console

import (
	"context"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/storage"
)

// Incidents is the part of incident.APIStore the incident pages read and act
// through (docs/DESIGN.md "Incidents"). A memberID limits a read to what the
// member's client has and its routing lets through.
type Incidents interface {
	ListIncidents(ctx context.Context, clientID, memberID, state string, limit int) ([]domain.Incident, error)
	GetIncident(ctx context.Context, id, memberID string) (domain.Incident, error)
	// ActOnIncident acknowledges ("ack") or resolves ("resolve") the incident
	// for the member; a repeated ack changes nothing.
	ActOnIncident(ctx context.Context, id, memberID, action, channel string, now time.Time) (domain.Incident, error)
}

// incidentsData is an incident list: the open ones first, then the
// acknowledged, then the latest resolved.
type incidentsData struct {
	// ClientID is set on the admin's page of one client.
	ClientID                     string
	Open, Acknowledged, Resolved []domain.Incident
	// Member is true when the viewer can ack and resolve.
	Member bool
}

// incidentRows is one state's table of an incident list.
type incidentRows struct {
	State  string
	List   []domain.Incident
	Member bool
	CSRF   string
}

// incidentForm is what the ack and resolve buttons need.
type incidentForm struct {
	Incident domain.Incident
	CSRF     string
}

// incidentStates are the sections of a list, in the order shown.
var incidentStates = []string{domain.IncidentOpen, domain.IncidentAcknowledged, domain.IncidentResolved}

// memberIncidents lists the incidents routed to the signed-in member.
func (c *Console) memberIncidents(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.incidentList(w, r, s, "", s.Subject)
}

// clientIncidents lists one client's incidents for the admin.
func (c *Console) clientIncidents(w http.ResponseWriter, r *http.Request, s *session) error {
	id := r.PathValue("id")
	if uuid.Validate(id) != nil {
		return storage.ErrNotFound
	}
	return c.incidentList(w, r, s, id, "")
}

// incidentList reads each state's newest page: the open ones are never hidden
// behind resolved ones, however many those are.
func (c *Console) incidentList(w http.ResponseWriter, r *http.Request, s *session, clientID, memberID string) error {
	if c.deps.Incidents == nil {
		return errorf(http.StatusNotFound, "There are no incidents here.")
	}
	d := incidentsData{ClientID: clientID, Member: s.Role == roleMember}
	lists := []*[]domain.Incident{&d.Open, &d.Acknowledged, &d.Resolved}
	for i, state := range incidentStates {
		found, err := c.deps.Incidents.ListIncidents(r.Context(), clientID, memberID, state, c.cfg.PageSize)
		if err != nil {
			return err
		}
		*lists[i] = found
	}
	c.render(w, r, http.StatusOK, "incidents", view{Title: "Incidents", Active: "incidents", Session: s, Data: d})
	return nil
}

// incidentData is one incident's page.
type incidentData struct {
	Incident domain.Incident
	Member   bool
	// Lasted is how long it has been unresolved (to its resolve, else to now).
	Lasted time.Duration
}

// incident shows one incident with its timeline; a member sees only its own
// client's, as in the API.
func (c *Console) incident(w http.ResponseWriter, r *http.Request, s *session) error {
	if c.deps.Incidents == nil {
		return errorf(http.StatusNotFound, "There are no incidents here.")
	}
	id := r.PathValue("id")
	if uuid.Validate(id) != nil {
		return storage.ErrNotFound
	}
	memberID := ""
	if s.Role == roleMember {
		memberID = s.Subject
	}
	inc, err := c.deps.Incidents.GetIncident(r.Context(), id, memberID)
	if err != nil {
		return err
	}
	d := incidentData{Incident: inc, Member: s.Role == roleMember, Lasted: inc.Duration(c.cfg.Now())}
	flash := ""
	if done := r.URL.Query().Get("done"); done == "ack" || done == "resolve" {
		flash = "Incident " + map[string]string{"ack": "acknowledged", "resolve": "resolved"}[done] + "."
	}
	c.render(w, r, http.StatusOK, "incident", view{Title: "Incident", Active: "incidents", Session: s, Flash: flash, Data: d})
	return nil
}

// actOnIncident is the ack and resolve buttons: the member acts on channel
// "console", then lands on the incident's page.
func (c *Console) actOnIncident(action string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, s *session) error {
		if c.deps.Incidents == nil {
			return errorf(http.StatusNotFound, "There are no incidents here.")
		}
		id := r.PathValue("id")
		if uuid.Validate(id) != nil {
			return storage.ErrNotFound
		}
		if _, err := c.deps.Incidents.ActOnIncident(r.Context(), id, s.Subject, action, "console", c.cfg.Now()); err != nil {
			return err
		}
		http.Redirect(w, r, "/console/incidents/"+id+"?done="+action, http.StatusSeeOther)
		return nil
	}
}
