package webapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lockstream/lockstream/analytics"
	"github.com/lockstream/lockstream/reading"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
	"github.com/lockstream/lockstream/webapi"
)

const testIngestToken = "test-ingest-token-fedcba9876543210"

// streamAPIOptions configure newStreamAPI.
type streamAPIOptions struct {
	// cfg is the server's config; AdminToken and, unless noIngestToken, IngestToken
	// are filled in.
	cfg           webapi.Config
	noIngestToken bool
	// noHistory leaves out WithHistory(the test's ClickHouse).
	noHistory bool
	opts      []webapi.Option
}

// newStreamAPI is newTestAPI for the ingest and history routes: a real server with
// an ingest token, serving history from the test's own ClickHouse database.
func newStreamAPI(t *testing.T, o streamAPIOptions) *testAPI {
	t.Helper()
	stores := storagetest.New(t)
	reg := prometheus.NewRegistry()
	cfg := o.cfg
	cfg.AdminToken = testToken
	if !o.noIngestToken {
		cfg.IngestToken = testIngestToken
	}
	opts := o.opts
	if !o.noHistory {
		opts = append(slices.Clone(opts), webapi.WithHistory(analytics.New(stores.ClickHouse.Conn(), nil)))
	}
	server, err := webapi.New(cfg, stores.Registry, nil, reg, reg, slog.New(slog.NewTextHandler(io.Discard, nil)), opts...)
	if err != nil {
		t.Fatalf("webapi.New: %v", err)
	}
	ts := httptest.NewServer(server.Handler())
	t.Cleanup(ts.Close)
	return &testAPI{t: t, url: ts.URL, stores: stores, registry: reg, server: server}
}

// ingest posts body to /v1/readings with the ingest token.
func (a *testAPI) ingest(body any) *response {
	a.t.Helper()
	return a.request("POST", "/v1/readings", body, "Authorization", "Bearer "+testIngestToken)
}

// kafkaPublisher returns a stream config with its topics created on the test's
// cluster and a publisher producing to it.
func kafkaPublisher(t *testing.T) (stream.Config, *stream.ReadingPublisher) {
	t.Helper()
	cfg := streamtest.Config(t, 4)
	return cfg, stream.NewReadingPublisher(cfg, streamtest.Client(t, cfg))
}

func TestIngestPublishesEveryReadingToKafka(t *testing.T) {
	t.Parallel()
	kcfg, publisher := kafkaPublisher(t)
	api := newStreamAPI(t, streamAPIOptions{opts: []webapi.Option{webapi.WithReadingPublisher(publisher)}})

	// Every accepted reading must come out of the topic as sent (compacted), keyed
	// by its sensor id, each sensor's readings on one partition in the order sent.
	want := map[string][]string{}

	single := `{"sensor_id":"single01","data":0,"ts":1795860000000}`
	var accepted struct{ Accepted int }
	api.ingest(" \n" + single + "\n").expect(http.StatusAccepted).decode(&accepted)
	if accepted.Accepted != 1 {
		t.Fatalf("single reading: accepted = %d, want 1", accepted.Accepted)
	}
	want["single01"] = append(want["single01"], single)

	// A full batch, pretty-printed so that it is larger than the 1 MiB of the
	// admin routes (the ingest route has its own limit), with every ts form.
	batch := make([]json.RawMessage, 0, webapi.MaxIngestReadings)
	for i := range webapi.MaxIngestReadings {
		id := fmt.Sprintf("sensor%010d", i%1000)
		var ts string
		switch i % 4 {
		case 0:
			ts = `,"ts":"2026-11-22T10:00:00.123456789Z"`
		case 1:
			ts = fmt.Sprintf(`,"ts":%d`, 1795860000000+int64(i))
		case 2:
			ts = `,"ts":null`
		}
		reading := fmt.Sprintf(`{"sensor_id":%q,"data":%d%s}`, id, (i/1000)%2, ts)
		batch = append(batch, json.RawMessage(reading))
		want[id] = append(want[id], reading)
	}
	body, err := json.MarshalIndent(batch, "", "        ")
	if err != nil {
		t.Fatal(err)
	}
	if len(body) <= webapi.DefaultMaxBodyBytes || len(body) >= webapi.DefaultMaxIngestBodyBytes {
		t.Fatalf("batch body is %d bytes; the test wants it between the admin and the ingest limits", len(body))
	}
	api.ingest(body).expect(http.StatusAccepted).decode(&accepted)
	if accepted.Accepted != webapi.MaxIngestReadings {
		t.Fatalf("batch: accepted = %d, want %d", accepted.Accepted, webapi.MaxIngestReadings)
	}

	// An empty array publishes nothing and says so.
	api.ingest("[]").expect(http.StatusAccepted).decode(&accepted)
	if accepted.Accepted != 0 {
		t.Fatalf("empty batch: accepted = %d, want 0", accepted.Accepted)
	}

	records := streamtest.ReadAll(t, kcfg, kcfg.ReadingsTopic())
	if len(records) != webapi.MaxIngestReadings+1 {
		t.Fatalf("the readings topic holds %d records, want %d", len(records), webapi.MaxIngestReadings+1)
	}
	got := map[string][]string{}
	partitionOf := map[string]int32{}
	for _, r := range records {
		key := string(r.Key)
		if p, ok := partitionOf[key]; ok && p != r.Partition {
			t.Fatalf("sensor %s is on partitions %d and %d", key, p, r.Partition)
		}
		partitionOf[key] = r.Partition
		got[key] = append(got[key], string(r.Value))
		// What the consumer will make of it: valid, and the key matches.
		if _, err := reading.Parse(r.Key, r.Value); err != nil {
			t.Fatalf("record %q=%q does not pass the consumer: %v", r.Key, r.Value, err)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d sensors on the topic, want %d", len(got), len(want))
	}
	for id, values := range want {
		if !slices.Equal(got[id], values) {
			t.Fatalf("records of %s = %q, want %q", id, got[id], values)
		}
	}
}

func TestIngestRejectsInvalidReadings(t *testing.T) {
	t.Parallel()
	kcfg, publisher := kafkaPublisher(t)
	api := newStreamAPI(t, streamAPIOptions{opts: []webapi.Option{webapi.WithReadingPublisher(publisher)}})

	// One bad reading rejects the request; every bad one is named with its reason.
	batch := `[
		{"sensor_id": "ok1", "data": 1},
		{"sensor_id": "bad1", "data": 2},
		{"sensor_id": "ok2", "data": 0, "ts": "2026-11-22T10:00:00Z"},
		{"sensor_id": "much_too_long_sensor_id", "data": 1},
		{"sensor_id": "bad4", "data": 1, "colour": "red"},
		42,
		{"sensor_id": "bad6", "data": 1, "ts": "yesterday"},
		{"sensor_id": "bad7", "data": "1"},
		{"sensor_id": "bad8", "data": 1, "data": 0},
		{"data": 1}
	]`
	p := api.ingest(batch).expectInvalid("[1].data", "[3].sensor_id", "[4]", "[5]", "[6].ts", "[7].data", "[8]", "[9].sensor_id")
	reasons := map[string]string{
		"[1].data": reading.ReasonBadData, "[3].sensor_id": reading.ReasonBadSensorID,
		"[4]": reading.ReasonUnknownField, "[5]": reading.ReasonNotJSON, "[6].ts": reading.ReasonBadTS,
		"[7].data": reading.ReasonBadData, "[8]": reading.ReasonDuplicate, "[9].sensor_id": reading.ReasonBadSensorID,
	}
	for _, e := range p.Errors {
		if !strings.HasPrefix(e.Detail, reasons[e.Field]+": ") {
			t.Errorf("error for %s = %q, want it to start with the reason %s", e.Field, e.Detail, reasons[e.Field])
		}
	}
	if !strings.Contains(p.Detail, "8 of 10") {
		t.Errorf("detail %q does not count the bad readings", p.Detail)
	}

	// A single reading is named without an index.
	api.ingest(`{"sensor_id": "x", "data": 5}`).expectInvalid("data")
	api.ingest(`{"sensor_id": "x", "data": 1, "extra": true}`).expectInvalid("")

	// A body that is not JSON, or neither an object nor an array, names no reading.
	for _, body := range []string{``, `  `, `[{"sensor_id": "x", "data": 1}`, `{"sensor_id": "x", "data": 1} {}`, `"x"`, `17`} {
		api.ingest(body).expectProblem(http.StatusBadRequest, "malformed-body")
	}

	// A thousand bad readings: all counted, a bounded number listed.
	many := "[" + strings.TrimSuffix(strings.Repeat(`{"sensor_id":"x","data":3},`, 1000), ",") + "]"
	p = api.ingest(many).expectProblem(http.StatusUnprocessableEntity, "validation", "1000 of 1000")
	if len(p.Errors) != 100 || p.Errors[0].Field != "[0].data" || p.Errors[99].Field != "[99].data" {
		t.Fatalf("%d errors listed (first %+v), want [0].data to [99].data", len(p.Errors), p.Errors[0])
	}

	// Too large: more than 4 MiB of body, or more than 10,000 readings.
	api.ingest("["+strings.Repeat(" ", webapi.DefaultMaxIngestBodyBytes)+"]").
		expectProblem(http.StatusRequestEntityTooLarge, "body-too-large", "4194304")
	tooMany := "[" + strings.TrimSuffix(strings.Repeat(`{"sensor_id":"x","data":1},`, webapi.MaxIngestReadings+1), ",") + "]"
	api.ingest(tooMany).expectProblem(http.StatusRequestEntityTooLarge, "body-too-large", "10001", "10000")

	// Nothing of any rejected request reached the topic, not even its valid readings.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := streamtest.EndOffsets(ctx, streamtest.Client(t, kcfg), kcfg.ReadingsTopic())
	if err != nil {
		t.Fatal(err)
	}
	for p, end := range ends {
		if end != 0 {
			t.Fatalf("partition %d of the readings topic holds %d records after rejected requests", p, end)
		}
	}
}

func TestIngestAuthentication(t *testing.T) {
	t.Parallel()
	_, publisher := kafkaPublisher(t)
	api := newStreamAPI(t, streamAPIOptions{opts: []webapi.Option{webapi.WithReadingPublisher(publisher)}})
	reading := `{"sensor_id": "a", "data": 1}`

	// The ingest route takes the ingest token and nothing else.
	for name, header := range map[string]string{
		"admin token":   "Bearer " + testToken,
		"missing":       "",
		"wrong token":   "Bearer nope",
		"token prefix":  "Bearer " + testIngestToken[:12],
		"basic scheme":  "Basic " + testIngestToken,
		"token, suffix": "Bearer " + testIngestToken + "x",
	} {
		resp := api.request("POST", "/v1/readings", reading, "Authorization", header)
		resp.expectProblem(http.StatusUnauthorized, "unauthorized")
		if got := resp.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
			t.Fatalf("%s: WWW-Authenticate = %q", name, got)
		}
	}
	api.ingest(reading).expect(http.StatusAccepted)

	// The admin routes, history included, do not take the ingest token.
	for _, route := range []struct{ method, path string }{
		{"GET", "/v1/sensors"}, {"POST", "/v1/sensors"}, {"GET", "/v1/sensors/a/events"}, {"GET", "/v1/sensors/a/readings"},
	} {
		api.request(route.method, route.path, nil, "Authorization", "Bearer "+testIngestToken).
			expectProblem(http.StatusUnauthorized, "unauthorized")
	}

	// The two tokens must differ, or the admin token would publish readings.
	reg := prometheus.NewRegistry()
	_, err := webapi.New(webapi.Config{AdminToken: "same", IngestToken: "same"}, api.stores.Registry, nil, reg, reg,
		slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "IngestToken") {
		t.Fatalf("New with IngestToken = AdminToken: err = %v, want one naming IngestToken", err)
	}
}

func TestIngestDisabled(t *testing.T) {
	t.Parallel()
	_, publisher := kafkaPublisher(t)
	reading := `{"sensor_id": "a", "data": 1}`

	// Without an ingest token the route is off, whatever the request carries.
	noToken := newStreamAPI(t, streamAPIOptions{noIngestToken: true, opts: []webapi.Option{webapi.WithReadingPublisher(publisher)}})
	for _, header := range []string{"", "Bearer " + testToken, "Bearer " + testIngestToken} {
		noToken.request("POST", "/v1/readings", reading, "Authorization", header).
			expectProblem(http.StatusServiceUnavailable, "unavailable", "ingest is disabled")
	}

	// Without a producer, likewise, once the request is authenticated.
	noProducer := newStreamAPI(t, streamAPIOptions{})
	for _, body := range []string{reading, `[]`} {
		noProducer.ingest(body).expectProblem(http.StatusServiceUnavailable, "unavailable", "ingest is disabled")
	}
	noProducer.request("POST", "/v1/readings", reading, "Authorization", "Bearer "+testToken).
		expectProblem(http.StatusUnauthorized, "unauthorized")
}

// failingCluster is a kfake cluster with lockstream's topics whose broker rejects
// every produce request with a non-retriable error.
func failingCluster(t *testing.T) stream.Config {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, stream.TopicReadings))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		produce := req.(*kmsg.ProduceRequest)
		resp := produce.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range produce.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.InvalidRecord.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return stream.Config{Brokers: c.ListenAddrs(), Partitions: 2}
}

func TestIngestBrokerFailureIs503(t *testing.T) {
	t.Parallel()
	reading := `[{"sensor_id": "a", "data": 1}, {"sensor_id": "b", "data": 0}]`

	// The broker answers with an error.
	rejecting := failingCluster(t)
	client, err := kgo.NewClient(stream.ClientOpts(rejecting)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	api := newStreamAPI(t, streamAPIOptions{opts: []webapi.Option{
		webapi.WithReadingPublisher(stream.NewReadingPublisher(rejecting, client))}})
	resp := api.ingest(reading)
	resp.expectProblem(http.StatusServiceUnavailable, "unavailable", "2 readings")
	if resp.header.Get("Retry-After") == "" {
		t.Fatal("a 503 from a broker failure has no Retry-After")
	}

	// The broker is gone: the publish timeout bounds the wait.
	gone, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, stream.TopicReadings))
	if err != nil {
		t.Fatal(err)
	}
	goneCfg := stream.Config{Brokers: gone.ListenAddrs(), Partitions: 2}
	gone.Close()
	goneClient, err := kgo.NewClient(stream.ClientOpts(goneCfg)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(goneClient.Close)
	api = newStreamAPI(t, streamAPIOptions{cfg: webapi.Config{PublishTimeout: time.Second}, opts: []webapi.Option{
		webapi.WithReadingPublisher(stream.NewReadingPublisher(goneCfg, goneClient))}})
	api.ingest(reading).expectProblem(http.StatusServiceUnavailable, "unavailable")
}

func TestIngestConfig(t *testing.T) {
	t.Parallel()
	c := webapi.Config{AdminToken: "a"}.WithDefaults()
	if c.MaxIngestBodyBytes != webapi.DefaultMaxIngestBodyBytes || c.PublishTimeout != webapi.DefaultPublishTimeout {
		t.Fatalf("defaults = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("a config without an ingest token is valid (ingest disabled): %v", err)
	}
	for field, bad := range map[string]webapi.Config{
		"IngestToken":        {AdminToken: "a", IngestToken: "a"},
		"MaxIngestBodyBytes": {AdminToken: "a", IngestToken: "i", MaxIngestBodyBytes: -1},
		"PublishTimeout":     {AdminToken: "a", IngestToken: "i", PublishTimeout: -time.Second},
	} {
		err := bad.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Fatalf("config with bad %s: err = %v, want one naming it", field, err)
		}
	}
}
