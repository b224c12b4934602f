package webapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockstream/lockstream/cyverse"
	"github.com/lockstream/lockstream/inbox"
)

// routes declares every route of the API. To add one: write an apiHandler in the
// file of its resource, register it here in the group with the right authentication,
// and describe it in openapi.yaml (TestOpenAPICoversEveryRoute fails otherwise).
// It stays one long list, a line a route, so that every route and the token that
// guards it read in one place.
func (s *Server) routes() *chi.Mux {
	r := chi.NewRouter()
	r.Use(s.recoverPanics, s.instrument)
	r.NotFound(s.handle(routeNotFound))
	r.MethodNotAllowed(s.methodNotAllowed(r))

	// Unauthenticated: probes, scraping and the API description.
	r.Group(func(r chi.Router) {
		r.Use(s.bounded)

		r.Get("/healthz", s.handle(s.health.healthz))
		r.Get("/readyz", s.handle(s.health.readyz))
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
		r.Get("/openapi.yaml", serveOpenAPI)
	})

	// Every group below but a streaming one (server-sent events, which would use
	// s.streaming in place of s.bounded) bounds its handlers by RequestTimeout.

	// The operator console: HTML pages with a session of their own (see WithConsole).
	// Its live stream has a route of its own so its long requests stay out of the
	// pages' latency histogram.
	r.Group(func(r chi.Router) {
		r.Use(s.bounded)

		r.Get("/console", s.serveConsole)
		r.Get("/console/*", s.serveConsole)
		r.Post("/console/*", s.serveConsole)
	})
	// Server-sent events: no read or write deadline, it ends with the viewer.
	r.With(s.streaming).Get("/console/live/events", s.serveConsole)

	// Ingest: sensors and their gateways, with the ingest token only.
	r.Group(func(r chi.Router) {
		r.Use(s.bounded)
		r.Use(s.requireToken(bearerAuth{name: "ingest", setting: "LOCKSTREAM_INGEST_TOKEN", realm: "lockstream-ingest",
			disabled: "ingest is disabled: the server has no ingest token"}, s.cfg.IngestToken))

		r.Post("/v1/readings", s.handle(s.ingestReadings))
	})

	// Push: the standalone push service, with the push token only.
	r.Group(func(r chi.Router) {
		r.Use(s.bounded)
		r.Use(s.requireToken(bearerAuth{name: "push", setting: "LOCKSTREAM_PUSH_TOKEN", realm: "lockstream-push",
			disabled: "pushes are disabled: the server has no push token"}, s.cfg.PushToken))

		r.Post("/push", s.handle(s.legacyPush))
		r.Post("/v1/pushes", s.handle(s.createPush))
		r.Get("/v1/pushes/{id}", s.handle(s.getPush))
	})

	// Admin: the registry, the history and the deliveries.
	r.Group(func(r chi.Router) {
		r.Use(s.bounded)
		r.Use(s.requireToken(bearerAuth{name: "admin", setting: "LOCKSTREAM_ADMIN_TOKEN", realm: "lockstream",
			disabled: "the admin API is disabled: the server has no admin token"}, s.cfg.AdminToken))

		r.Post("/v1/sensors", s.handle(s.createSensor))
		r.Get("/v1/sensors", s.handle(s.listSensors))
		r.Get("/v1/sensors/unregistered", s.handle(s.listUnregistered))
		r.Get("/v1/sensors/{id}", s.handle(s.getSensor))
		r.Patch("/v1/sensors/{id}", s.handle(s.updateSensor))
		r.Delete("/v1/sensors/{id}", s.handle(s.deleteSensor))
		r.Get("/v1/sensors/{id}/clients", s.handle(s.listSensorClients))
		r.Get("/v1/sensors/{id}/events", s.handle(s.sensorEvents))
		r.Get("/v1/sensors/{id}/readings", s.handle(s.sensorReadings))
		r.Put("/v1/sensors/{id}/maintenance", s.handle(s.putSensorMaintenance))
		r.Put("/v1/sites/{site}/maintenance", s.handle(s.putSiteMaintenance))

		r.Post("/v1/clients", s.handle(s.createClient))
		r.Get("/v1/clients", s.handle(s.listClients))
		r.Get("/v1/clients/{id}", s.handle(s.getClient))
		r.Patch("/v1/clients/{id}", s.handle(s.updateClient))
		r.Delete("/v1/clients/{id}", s.handle(s.deleteClient))
		r.Post("/v1/clients/{id}/secret", s.handle(s.rotateClientSecret))

		r.Get("/v1/clients/{id}/sensors", s.handle(s.listClientSensors))
		r.Put("/v1/clients/{id}/sensors/{sensor_id}", s.handle(s.linkSensor))
		r.Delete("/v1/clients/{id}/sensors/{sensor_id}", s.handle(s.unlinkSensor))

		r.Get("/v1/clients/{id}/deliveries", s.handle(s.listClientDeliveries))
		r.Get("/v1/clients/{id}/events", s.handle(s.listClientEvents))
		r.Get("/v1/deliveries/{id}", s.handle(s.getDelivery))
		r.Post("/v1/deliveries/{id}/retry", s.handle(s.retryDelivery))
		r.Post("/v1/clients/{id}/deliveries/recover", s.handle(s.recoverDeliveries))
		r.Get("/v1/clients/{id}/endpoint", s.handle(s.getEndpoint))
		r.Post("/v1/clients/{id}/endpoint/enable", s.handle(s.enableEndpoint))

		r.Post("/notification", s.handle(s.postNotification))

		r.Get("/v1/analytics/summary", s.handle(s.analyticsSummary))
		r.Get("/v1/analytics/top", s.handle(s.analyticsTop))
		r.Get("/v1/clients/{id}/report", s.handle(s.clientReport))
	})
	// Exports stream for as long as the range takes: no write deadline.
	r.Group(func(r chi.Router) {
		r.Use(s.streaming)
		r.Use(s.requireToken(bearerAuth{name: "admin", setting: "LOCKSTREAM_ADMIN_TOKEN", realm: "lockstream",
			disabled: "the admin API is disabled: the server has no admin token"}, s.cfg.AdminToken))

		r.Get("/v1/analytics/export", s.handle(s.analyticsExport))
	})
	s.inboxRoutes(r)
	s.incidentRoutes(r)
	s.cyverseV1Routes(r)
	return r
}

// cyverseV1Routes mounts the CyVerse notification API v1 (package cyverse): the
// notification agent's routes at the root, for its old clients, with the admin
// token or LOCKSTREAM_V1_TOKEN; ?user= (or "user") names the member.
func (s *Server) cyverseV1Routes(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(s.bounded)
		r.Use(s.requireToken(bearerAuth{name: "admin or v1", setting: "LOCKSTREAM_ADMIN_TOKEN", realm: "lockstream",
			disabled: "the admin API is disabled: the server has no admin token"}, s.cfg.AdminToken, s.cfg.V1Token))

		v1 := &cyverse.API{Disabled: membersDisabled(), MaxBodyBytes: s.cfg.MaxBodyBytes, Describe: inbox.Message.Describe}
		if s.members != nil && s.inbox != nil {
			v1.Members, v1.Inbox = s.members, s.inbox
		}
		v1.Routes(r, func(h cyverse.Handler) http.HandlerFunc { return s.handle(apiHandler(h)) })
	})
}

// inboxRoutes declares the routes of members, their inboxes and live streams.
func (s *Server) inboxRoutes(r chi.Router) {
	// Admin: members and free-form notifications.
	r.Group(func(r chi.Router) {
		r.Use(s.bounded)
		r.Use(s.requireToken(bearerAuth{name: "admin", setting: "LOCKSTREAM_ADMIN_TOKEN", realm: "lockstream",
			disabled: "the admin API is disabled: the server has no admin token"}, s.cfg.AdminToken))

		r.Post("/v1/clients/{id}/members", s.handle(s.createMember))
		r.Get("/v1/clients/{id}/members", s.handle(s.listClientMembers))
		r.Get("/v1/members/{id}", s.handle(s.getMember))
		r.Patch("/v1/members/{id}", s.handle(s.updateMember))
		r.Delete("/v1/members/{id}", s.handle(s.deleteMember))
		r.Post("/v1/members/{id}/token", s.handle(s.rotateMemberToken))

		r.Post("/v1/notifications", s.handle(s.createNotification))
	})

	// A member's own inbox: a member token, or the admin token with ?user=.
	r.Group(func(r chi.Router) {
		r.Use(s.bounded)
		r.Use(s.requireMember(true))

		r.Get("/v1/messages", s.handle(s.listMessages))
		r.Post("/v1/messages/seen", s.handle(s.markMessages(inbox.ActionSeen)))
		r.Post("/v1/messages/delete", s.handle(s.markMessages(inbox.ActionDelete)))
		r.Get("/v1/messages/{id}", s.handle(s.getMessage))
		r.Delete("/v1/messages/{id}", s.handle(s.markMessage(inbox.ActionDelete)))
		r.Post("/v1/messages/{id}/seen", s.handle(s.markMessage(inbox.ActionSeen)))
		r.Post("/v1/messages/{id}/unseen", s.handle(s.markMessage(inbox.ActionUnseen)))
		r.Post("/v1/stream/ack", s.handle(s.ackStream))
	})

	// Tickets: a member token only, so that the stream opened is the member's own.
	r.Group(func(r chi.Router) {
		r.Use(s.bounded)
		r.Use(s.requireMember(false))

		r.Post("/v1/stream/tickets", s.handle(s.createStreamTicket))
	})

	// The stream: its single-use ticket is its credential (EventSource sends no
	// Authorization header), and it clears the server's write deadline itself.
	r.With(s.streaming).Get("/v1/stream", s.handle(s.openStream))
}
