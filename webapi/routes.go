package webapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routes declares every route of the API. To add one: write an apiHandler in the
// file of its resource, register it here in the group with the right authentication,
// and describe it in openapi.yaml (TestOpenAPICoversEveryRoute fails otherwise).
func (s *Server) routes() *chi.Mux {
	r := chi.NewRouter()
	r.Use(s.recoverPanics, s.instrument)
	r.NotFound(s.handle(routeNotFound))
	r.MethodNotAllowed(s.methodNotAllowed(r))

	// Unauthenticated: probes, scraping and the API description.
	r.Get("/healthz", s.handle(s.healthz))
	r.Get("/readyz", s.handle(s.readyz))
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	r.Get("/openapi.yaml", serveOpenAPI)

	// Ingest: sensors and their gateways, with the ingest token only.
	r.Group(func(r chi.Router) {
		r.Use(s.requireIngest)

		r.Post("/v1/readings", s.handle(s.ingestReadings))
	})

	// Push: the standalone push service, with the push token only.
	r.Group(func(r chi.Router) {
		r.Use(s.requirePush)

		r.Post("/push", s.handle(s.legacyPush))
		r.Post("/v1/pushes", s.handle(s.createPush))
		r.Get("/v1/pushes/{id}", s.handle(s.getPush))
	})

	// Admin: the registry, the history and the deliveries.
	r.Group(func(r chi.Router) {
		r.Use(s.requireAdmin)

		r.Post("/v1/sensors", s.handle(s.createSensor))
		r.Get("/v1/sensors", s.handle(s.listSensors))
		r.Get("/v1/sensors/unregistered", s.handle(s.listUnregistered))
		r.Get("/v1/sensors/{id}", s.handle(s.getSensor))
		r.Patch("/v1/sensors/{id}", s.handle(s.updateSensor))
		r.Delete("/v1/sensors/{id}", s.handle(s.deleteSensor))
		r.Get("/v1/sensors/{id}/clients", s.handle(s.listSensorClients))
		r.Get("/v1/sensors/{id}/events", s.handle(s.sensorEvents))
		r.Get("/v1/sensors/{id}/readings", s.handle(s.sensorReadings))

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
		r.Get("/v1/deliveries/{id}", s.handle(s.getDelivery))
		r.Post("/v1/deliveries/{id}/retry", s.handle(s.retryDelivery))
	})
	return r
}
