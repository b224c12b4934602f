package webapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi"
)

// GET /v1/clients/{id}/events lists the client's events by seq, a page at a
// time, with what the webhook carried.
func TestClientEventFeed(t *testing.T) {
	t.Parallel()
	api := newDeliveryAPI(t, func(s *storagetest.Stores) []webapi.Option {
		return []webapi.Option{webapi.WithClientEvents(s.Postgres)}
	})
	api.createSensor("s1", "Door s1")
	c := api.createClient("c")
	api.request("PUT", "/v1/clients/"+c.ID+"/sensors/s1", nil).expect(http.StatusNoContent)
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	zero := 0
	var batch []storage.NotificationInput
	for i := range 5 {
		typ := "state_changed"
		if i == 2 {
			typ = "connection_lost"
		}
		batch = append(batch, storage.NotificationInput{EventID: fmt.Sprintf("e%d", i+1), Type: typ, SensorID: "s1",
			Data: &zero, At: at.Add(time.Duration(i) * time.Second)})
	}
	if _, err := fanout.NewPostgresStore(api.stores.Postgres).CreateNotifications(context.Background(), batch); err != nil {
		t.Fatal(err)
	}

	type page struct {
		Items []struct {
			Seq      int64  `json:"seq"`
			ID       string `json:"id"`
			Type     string `json:"type"`
			Severity string `json:"severity"`
			Sensor   struct {
				ID, Address string
			} `json:"sensor"`
		} `json:"items"`
		NextAfter *int64 `json:"next_after"`
	}
	var p page
	api.request("GET", "/v1/clients/"+c.ID+"/events?after=1&limit=2", nil).expect(http.StatusOK).decode(&p)
	if len(p.Items) != 2 || p.Items[0].Seq != 2 || p.Items[1].Seq != 3 || p.NextAfter == nil || *p.NextAfter != 3 {
		t.Fatalf("page after 1 = %+v", p)
	}
	if lost := p.Items[1]; lost.ID != "e3" || lost.Type != "connection_lost" || lost.Severity != "critical" ||
		lost.Sensor.ID != "s1" || lost.Sensor.Address != "Door s1" {
		t.Fatalf("seq 3 = %+v, want e3, lost while unlocked", lost)
	}
	p = page{}
	api.request("GET", "/v1/clients/"+c.ID+"/events?after=3", nil).expect(http.StatusOK).decode(&p)
	if len(p.Items) != 2 || p.Items[1].Seq != 5 || p.NextAfter != nil {
		t.Fatalf("last page = %+v", p)
	}
	api.request("GET", "/v1/clients/"+c.ID+"/events?after=-1", nil).expectProblem(http.StatusBadRequest, "invalid-parameter", "after")
	api.request("GET", "/v1/clients/"+c.ID+"/events?limit=0", nil).expectProblem(http.StatusBadRequest, "invalid-parameter", "limit")
	api.request("GET", "/v1/clients/0190a0a0-0000-7000-8000-000000000000/events", nil).expectProblem(http.StatusNotFound, "not-found")
}
