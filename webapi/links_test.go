package webapi_test

import (
	"net/http"
	"slices"
	"testing"
)

func TestLinks(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, apiOptions{})
	acme, other := api.createClient("acme"), api.createClient("other")
	for _, id := range []string{"door1", "door2", "door3"} {
		api.createSensor(id, "site "+id)
	}
	link := func(clientID, sensorID string) string { return "/v1/clients/" + clientID + "/sensors/" + sensorID }

	// Linking is idempotent.
	for _, id := range []string{"door3", "door1", "door2", "door1"} {
		api.request("PUT", link(acme.ID, id), nil).expect(http.StatusNoContent)
	}
	api.request("PUT", link(other.ID, "door1"), nil).expect(http.StatusNoContent)

	// The client's sensors, ordered by id and paged.
	var first, second pageJSON[sensorJSON]
	api.request("GET", "/v1/clients/"+acme.ID+"/sensors?limit=2", nil).expect(http.StatusOK).decode(&first)
	if len(first.Items) != 2 || first.Items[0].ID != "door1" || first.Items[1].ID != "door2" || first.NextCursor == "" {
		t.Fatalf("first page = %+v", first)
	}
	api.request("GET", "/v1/clients/"+acme.ID+"/sensors?limit=2&cursor="+first.NextCursor, nil).expect(http.StatusOK).decode(&second)
	if len(second.Items) != 1 || second.Items[0].ID != "door3" || second.NextCursor != "" {
		t.Fatalf("second page = %+v", second)
	}

	// The sensor's clients, without secrets.
	var watchers pageJSON[map[string]any]
	api.request("GET", "/v1/sensors/door1/clients", nil).expect(http.StatusOK).decode(&watchers)
	var ids []string
	for _, c := range watchers.Items {
		expectNoSecret(t, c)
		ids = append(ids, c["id"].(string))
	}
	if !slices.Equal(ids, []string{acme.ID, other.ID}) {
		t.Fatalf("clients of door1 = %v, want %v", ids, []string{acme.ID, other.ID})
	}

	// Unlink, then unlinking again is a 404 naming the missing link.
	api.request("DELETE", link(acme.ID, "door1"), nil).expect(http.StatusNoContent)
	api.request("DELETE", link(acme.ID, "door1"), nil).expectProblem(http.StatusNotFound, "not-found", "does not watch", "door1")
	api.request("GET", "/v1/sensors/door1/clients", nil).expect(http.StatusOK).decode(&watchers)
	if len(watchers.Items) != 1 || watchers.Items[0]["id"] != other.ID {
		t.Fatalf("clients of door1 after unlink = %v", watchers.Items)
	}

	// 404s say which end is missing.
	const unknownClient = "0195f1a2-0000-7000-8000-000000000000"
	api.request("PUT", link(acme.ID, "nosuch"), nil).expectProblem(http.StatusNotFound, "not-found", `sensor "nosuch"`)
	api.request("PUT", link(unknownClient, "door1"), nil).expectProblem(http.StatusNotFound, "not-found", unknownClient)
	api.request("DELETE", link(unknownClient, "door1"), nil).expectProblem(http.StatusNotFound, "not-found", unknownClient)
	api.request("DELETE", link(acme.ID, "nosuch"), nil).expectProblem(http.StatusNotFound, "not-found", `sensor "nosuch"`)
	api.request("PUT", link("not-a-uuid", "door1"), nil).expectProblem(http.StatusNotFound, "not-found", "not-a-uuid")
	api.request("PUT", link(acme.ID, "bad-id!"), nil).expectProblem(http.StatusNotFound, "not-found", "bad-id!")
	api.request("GET", "/v1/sensors/nosuch/clients", nil).expectProblem(http.StatusNotFound, "not-found", "nosuch")
	api.request("GET", "/v1/clients/"+unknownClient+"/sensors", nil).expectProblem(http.StatusNotFound, "not-found", unknownClient)
	api.request("GET", "/v1/sensors/door1/clients?limit=0", nil).expectProblem(http.StatusBadRequest, "invalid-parameter", "limit")

	// Deleting a sensor drops its links.
	api.request("DELETE", "/v1/sensors/door2", nil).expect(http.StatusNoContent)
	api.request("GET", "/v1/clients/"+acme.ID+"/sensors", nil).expect(http.StatusOK).decode(&first)
	if len(first.Items) != 1 || first.Items[0].ID != "door3" {
		t.Fatalf("sensors of acme after deleting door2 = %+v", first.Items)
	}
}
