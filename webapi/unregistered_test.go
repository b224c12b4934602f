package webapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/webapi"
)

// lateUnregistered is the test's Postgres, known once newTestAPI made it.
type lateUnregistered struct{ pg *consumer.PostgresStore }

func (l *lateUnregistered) TopUnregistered(ctx context.Context, since time.Time, limit int) ([]domain.UnregisteredSensor, error) {
	return l.pg.TopUnregistered(ctx, since, limit)
}

// TestUnregisteredSensorsSumsTheLastDay stores the summaries of two consumer
// processes over three hours (one of them too old) and checks that the route
// sums the last 24 hours, most first, leaving out an id registered since.
func TestUnregisteredSensorsSumsTheLastDay(t *testing.T) {
	t.Parallel()
	late := &lateUnregistered{}
	api := newTestAPI(t, apiOptions{opts: []webapi.Option{webapi.WithUnregistered(late)}})
	late.pg = consumer.NewPostgresStore(api.stores.Postgres)
	ctx := context.Background()
	now := time.Now().UTC()
	hour := now.Truncate(time.Hour)
	seen := now.Add(-time.Minute).Truncate(time.Second)
	expired := now.Add(-25 * time.Hour)
	for _, s := range []struct {
		hour    time.Time
		process string
		counts  []consumer.UnregisteredCount
	}{
		{hour, "a", []consumer.UnregisteredCount{{SensorID: "noisy", Count: 50, LastSeen: seen}, {SensorID: "quiet", Count: 3, CountError: 2, LastSeen: seen}}},
		{hour, "b", []consumer.UnregisteredCount{{SensorID: "noisy", Count: 20, LastSeen: seen}, {SensorID: "later", Count: 100, LastSeen: seen}}},
		{hour.Add(-2 * time.Hour), "a", []consumer.UnregisteredCount{{SensorID: "quiet", Count: 40, LastSeen: seen.Add(-2 * time.Hour)}}},
		{hour.Add(-30 * time.Hour), "a", []consumer.UnregisteredCount{{SensorID: "old", Count: 1000, LastSeen: seen.Add(-30 * time.Hour)}}},
	} {
		// The oldest is written last with an expiry before it, so it stays.
		exp := expired
		if s.hour.Before(expired) {
			exp = s.hour.Add(-time.Hour)
		}
		if err := consumer.NewPostgresStore(api.stores.Postgres).ReplaceUnregistered(ctx, s.hour, s.process, s.counts, exp); err != nil {
			t.Fatal(err)
		}
	}
	api.createSensor("later", "registered since")

	var got struct {
		Items []struct {
			SensorID string    `json:"sensor_id"`
			Count    int64     `json:"count"`
			MinCount int64     `json:"min_count"`
			LastSeen time.Time `json:"last_seen"`
		} `json:"items"`
	}
	api.request("GET", "/v1/sensors/unregistered", nil).expect(http.StatusOK).decode(&got)
	if len(got.Items) != 2 {
		t.Fatalf("items = %+v, want noisy and quiet", got.Items)
	}
	if a := got.Items[0]; a.SensorID != "noisy" || a.Count != 70 || a.MinCount != 70 || !a.LastSeen.Equal(seen) {
		t.Errorf("first = %+v, want noisy with 70 readings last seen %v", a, seen)
	}
	if b := got.Items[1]; b.SensorID != "quiet" || b.Count != 43 || b.MinCount != 41 {
		t.Errorf("second = %+v, want quiet with 41 to 43 readings", b)
	}
	api.request("GET", "/v1/sensors/unregistered?limit=1", nil).expect(http.StatusOK).decode(&got)
	if len(got.Items) != 1 || got.Items[0].SensorID != "noisy" {
		t.Errorf("limit=1 gave %+v", got.Items)
	}
	api.request("GET", "/v1/sensors/unregistered?limit=1001", nil).expectProblem(http.StatusBadRequest, "invalid-parameter")

	// A flush replaces its (hour, process) slice and drops what expired.
	if err := consumer.NewPostgresStore(api.stores.Postgres).ReplaceUnregistered(ctx, hour, "a",
		[]consumer.UnregisteredCount{{SensorID: "quiet", Count: 1, LastSeen: seen}}, expired); err != nil {
		t.Fatal(err)
	}
	api.request("GET", "/v1/sensors/unregistered", nil).expect(http.StatusOK).decode(&got)
	if len(got.Items) != 2 || got.Items[0].SensorID != "quiet" || got.Items[0].Count != 41 ||
		got.Items[1].SensorID != "noisy" || got.Items[1].Count != 20 {
		t.Errorf("after the replace: %+v, want quiet 41 and noisy 20", got.Items)
	}
}

// TestServerJudgesTimeByItsClock: the last day is the last day of the server's
// clock (Config.Now, the process's one clock), not of the machine's: a summary
// of 2001 is listed by a server whose clock says it is that day, and not by one
// an hour later than a day after it.
func TestServerJudgesTimeByItsClock(t *testing.T) {
	t.Parallel()
	then := time.Date(2001, 2, 3, 12, 30, 0, 0, time.UTC)
	for _, c := range []struct {
		now  time.Time
		want int
	}{{then, 1}, {then.Add(25 * time.Hour), 0}} {
		late := &lateUnregistered{}
		api := newTestAPI(t, apiOptions{cfg: webapi.Config{Now: func() time.Time { return c.now }},
			opts: []webapi.Option{webapi.WithUnregistered(late)}})
		late.pg = consumer.NewPostgresStore(api.stores.Postgres)
		hour := then.Truncate(time.Hour)
		if err := late.pg.ReplaceUnregistered(context.Background(), hour, "a",
			[]consumer.UnregisteredCount{{SensorID: "old-timer", Count: 5, LastSeen: then}}, hour.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Items []struct {
				SensorID string `json:"sensor_id"`
			} `json:"items"`
		}
		api.request("GET", "/v1/sensors/unregistered", nil).expect(http.StatusOK).decode(&got)
		if len(got.Items) != c.want {
			t.Errorf("with the clock at %s the route listed %+v; want %d summaries", c.now, got.Items, c.want)
		}
	}
}
