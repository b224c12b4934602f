package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/heartbeat"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// eventsGate holds the produce requests to lockstream.events on the test's
// kfake broker, so that a heartbeat process can be killed at the one moment
// that matters: it has decided a site outage (its site_outages row is
// committed before it publishes) and is publishing it.
type eventsGate struct {
	cluster *kfake.Cluster
	topic   string
	topicID [16]byte
	// deliver: the held request reaches the log once the gate opens (the
	// process dies after Kafka took the outage, before it recorded so);
	// otherwise the broker closes the connection of every request until then
	// (it dies before Kafka had it).
	deliver bool

	mu     sync.Mutex
	open   bool
	held   chan struct{} // closed at the first request held
	opened chan struct{} // closed when the gate opens
}

// holdEvents starts holding produce requests to lockstream.events.
func holdEvents(t *testing.T, cluster *kfake.Cluster, kafka stream.Config, deliver bool) *eventsGate {
	t.Helper()
	g := &eventsGate{cluster: cluster, topic: kafka.EventsTopic(), deliver: deliver,
		held: make(chan struct{}), opened: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), processWait)
	defer cancel()
	topics, err := kadm.NewClient(streamtest.Client(t, kafka)).ListTopics(ctx, g.topic)
	if err != nil {
		t.Fatalf("reading the id of %s: %v", g.topic, err)
	}
	g.topicID = topics[g.topic].ID
	cluster.ControlKey(int16(kmsg.Produce), g.control)
	return g
}

// control runs on the broker's loop for every produce request.
func (g *eventsGate) control(req kmsg.Request) (kmsg.Response, error, bool) {
	if !g.toEvents(req.(*kmsg.ProduceRequest)) {
		return nil, nil, false
	}
	g.mu.Lock()
	open, first := g.open, !g.isHeld()
	if !open && first {
		close(g.held)
	}
	g.mu.Unlock()
	switch {
	case open:
		return nil, nil, false
	case g.deliver && first:
		// Sleeping yields the broker to other connections; the request is
		// then handled as usual, for a producer that is gone.
		g.cluster.SleepControl(func() { <-g.opened })
		return nil, nil, false
	}
	// Any other request (a retry on a new connection) is refused by closing
	// its connection, so nothing reaches the log while the gate is shut.
	g.cluster.KeepControl()
	return nil, errors.New("lockstream.events is held by the test"), true
}

func (g *eventsGate) isHeld() bool {
	select {
	case <-g.held:
		return true
	default:
		return false
	}
}

func (g *eventsGate) toEvents(req *kmsg.ProduceRequest) bool {
	for _, topic := range req.Topics {
		if topic.Topic == g.topic || topic.TopicID == g.topicID && g.topicID != ([16]byte{}) {
			return true
		}
	}
	return false
}

// release opens the gate: every later request goes through.
func (g *eventsGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		g.open = true
		close(g.opened)
	}
}

// startFleetNode starts, on fresh stores and a kfake broker of its own, every
// daemon of `lockstream all` as a process of its own except the heartbeat,
// which the test starts and kills; it returns the node, its stores and its
// broker.
func startFleetNode(t *testing.T, settings ...string) (*deliveryNode, *storagetest.Stores, *kfake.Cluster, stream.Config) {
	t.Helper()
	stores := storagetest.New(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(cluster.Close)
	kafka := stream.Config{Brokers: cluster.ListenAddrs(), Partitions: 12}
	ctx, cancel := context.WithTimeout(context.Background(), processWait)
	defer cancel()
	if err := stream.EnsureTopics(ctx, streamtest.Client(t, kafka), kafka); err != nil {
		t.Fatalf("creating topics: %v", err)
	}
	addr := freeAddr(t)
	env := append(storeSettings(kafka, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL, stores.RedisPrefix),
		"LOCKSTREAM_HTTP_ADDR="+addr,
		"LOCKSTREAM_ADMIN_TOKEN="+deliveryAdminToken,
		"LOCKSTREAM_INGEST_TOKEN="+deliveryIngestToken,
		"LOCKSTREAM_DATA_DIR="+t.TempDir(),
	)
	n := &deliveryNode{t: t, h: newHarness(t, append(env, settings...)...), api: "http://" + addr, procs: map[string]*proc{}}
	for _, sub := range []string{"api", "consume", "history", "fanout", "retrier"} {
		n.start(sub)
	}
	n.h.waitFor("the API to be ready", func() (bool, string) {
		resp, err := http.Get(n.api + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, "readyz: " + resp.Status
	})
	return n, stores, cluster, kafka
}

// postCounter counts every webhook POST by event type and id, duplicates
// included (bodySink keeps one body per id), in front of a bodySink.
type postCounter struct {
	sink *bodySink
	mu   sync.Mutex
	byID map[string]int
	typ  map[string]string
}

func startPostCounter(t *testing.T) *postCounter {
	t.Helper()
	c := &postCounter{sink: &bodySink{refused: map[string]bool{}}, byID: map[string]int{}, typ: map[string]string{}}
	c.sink.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		var b fleetBody
		if err == nil && json.Unmarshal(raw, &b) == nil {
			c.mu.Lock()
			c.byID[b.ID]++
			c.typ[b.ID] = b.Type
			c.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
		c.sink.serve(w, r)
	}))
	t.Cleanup(c.sink.server.Close)
	return c
}

// posts returns how many POSTs carried each event id of type typ.
func (c *postCounter) posts(typ string) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for id, n := range c.byID {
		if c.typ[id] == typ {
			out[id] = n
		}
	}
	return out
}

// TestProcessSiteOutageDeciderKilledBeforePublishing: a `lockstream
// heartbeat` process decides a site outage (its site_outages row committed)
// and is SIGKILLed while publishing it — before Kafka had it, or after Kafka
// took it but before the process learned so and recorded it. A second
// heartbeat process republishes it (2 × the publish timeout later, under the
// same id and with the same content): lockstream.events holds one site_outage
// id, the receiver gets one site_outage webhook, the client's feed lists it
// once, and no connection_lost of the covered sensors; one site_restored
// follows.
func TestProcessSiteOutageDeciderKilledBeforePublishing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		reached bool
	}{
		{"before Kafka had it", false},
		{"after Kafka took it", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			siteOutageDeciderKilled(t, tc.reached)
		})
	}
}

func siteOutageDeciderKilled(t *testing.T, reached bool) {
	ctx := context.Background()
	n, stores, cluster, kafka := startFleetNode(t,
		"LOCKSTREAM_HEARTBEAT_TIMEOUT=6s", "LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL=200ms",
		"LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true")
	decider := n.h.start("heartbeat (decider)", "heartbeat")
	sink := startPostCounter(t)
	sensors := []string{"hq1", "hq2", "hq3", "hq4"}
	c := n.call("POST", "/v1/clients", deliveryAdminToken, map[string]any{"name": "site owner", "webhook_url": sink.sink.server.URL}, http.StatusCreated)
	clientID := c["id"].(string)
	sink.sink.setSecret(c["secret"].(string))
	for _, s := range sensors {
		n.call("POST", "/v1/sensors", deliveryAdminToken, map[string]any{"id": s, "address": "HQ " + s, "site": "hq"}, http.StatusCreated)
		n.call("PUT", "/v1/clients/"+clientID+"/sensors/"+s, deliveryAdminToken, nil, http.StatusNoContent)
	}
	for _, s := range sensors {
		n.flip(s, 1)
	}
	n.keepReporting("hq4", 300*time.Millisecond)
	// Every event before the outage is out: from now on only the heartbeat
	// publishes to lockstream.events.
	sink.sink.waitAccepted(n, len(sensors))
	gate := holdEvents(t, cluster, kafka, reached)
	t.Cleanup(gate.release)

	n.h.waitFor("the decider to hold a site outage it is publishing", func() (bool, string) {
		if !gate.isHeld() {
			return false, "no publication to lockstream.events yet"
		}
		outages, err := heartbeat.NewPostgresStore(stores.Postgres).UnpublishedSiteEvents(ctx, time.Now().Add(time.Hour), 10, false)
		if err != nil {
			t.Fatal(err)
		}
		return len(outages) == 1, fmt.Sprintf("unpublished outages %+v", outages)
	})
	decider.kill()
	outages, err := heartbeat.NewPostgresStore(stores.Postgres).UnpublishedSiteEvents(ctx, time.Now().Add(time.Hour), 10, false)
	if err != nil || len(outages) != 1 {
		t.Fatalf("after the kill: unpublished outages %+v (%v), want the one decided", outages, err)
	}
	outageID := outages[0].ID
	gate.release()
	n.h.start("heartbeat (survivor)", "heartbeat")

	n.h.waitFor("the site_outage webhook", func() (bool, string) {
		got := sink.posts("site_outage")
		return len(got) >= 1, fmt.Sprintf("site_outage posts %v", got)
	})
	// hq1 and hq2 are back for good. The outage ends once it is recorded
	// published: when the decider's copy reached Kafka, that is the survivor's
	// republication, 2 × the publish timeout after the decision.
	n.keepReporting("hq1", 300*time.Millisecond)
	n.keepReporting("hq2", 300*time.Millisecond)
	n.h.waitFor("the site_restored webhook and hq1's and hq2's restores", func() (bool, string) {
		restored, back := sink.posts("site_restored"), sink.posts("connection_restored")
		return len(restored) >= 1 && len(back) >= 2, fmt.Sprintf("site_restored %v, connection_restored %v", restored, back)
	})

	if got := sink.posts("site_outage"); len(got) != 1 || got[outageID] != 1 {
		t.Errorf("site_outage webhooks %v, want one, of %s", got, outageID)
	}
	if got := sink.posts("site_restored"); len(got) != 1 {
		t.Errorf("site_restored webhooks %v, want one", got)
	}
	if got := sink.posts("connection_lost"); len(got) != 0 {
		accepted, _, _ := sink.sink.snapshot()
		t.Errorf("connection_lost webhooks %v, want none: the outage covers them; received %+v", got, accepted)
	}
	// On lockstream.events: one site_outage id; a second copy (the decider's,
	// which reached Kafka) is the same record, which the fan-out drops.
	var copies [][]byte
	for _, r := range streamtest.ReadAll(t, kafka, kafka.EventsTopic()) {
		e, err := event.Decode(r.Value)
		if err != nil {
			t.Fatalf("lockstream.events holds %q: %v", r.Value, err)
		}
		if e.Type != event.SiteOutage {
			continue
		}
		if e.ID != outageID {
			t.Errorf("a second site_outage on lockstream.events: %s", r.Value)
		}
		copies = append(copies, r.Value)
	}
	if want := map[bool]int{false: 1, true: 2}[reached]; len(copies) != want {
		t.Errorf("%d copies of the site_outage on lockstream.events, want %d", len(copies), want)
	}
	for _, again := range copies[1:] {
		if !bytes.Equal(again, copies[0]) {
			t.Errorf("the site_outage republished as %s, first published as %s", again, copies[0])
		}
	}
	feed := n.call("GET", "/v1/clients/"+clientID+"/events?after=0", deliveryAdminToken, nil, http.StatusOK)
	raw, err := json.Marshal(feed["items"])
	if err != nil {
		t.Fatal(err)
	}
	var items []fleetBody
	if err := json.Unmarshal(raw, &items); err != nil {
		t.Fatal(err)
	}
	if counts := countTypes(items); counts["site_outage"] != 1 || counts["site_restored"] != 1 || counts["connection_lost"] != 0 {
		t.Errorf("the client's feed lists %v, want one site_outage, one site_restored, no connection_lost", counts)
	}
}
