package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockstream/lockstream/storage/storagetest"
)

// The shutdown process tests run `lockstream all` as a process and stop it
// with signals (DESIGN.md "Process lifecycle").

// fleetLoad posts one reading per sensor in one request, round after round,
// each round flipping every sensor (so every reading is a change), until the
// API refuses or the test ends. A round is accepted once the API answered 202:
// Kafka has it. The first round that fails ends the load: one whose connection
// was refused was not sent; of any other failure (an answer cut short, a 503)
// whether it reached Kafka is unknown.
type fleetLoad struct {
	api     string
	sensors []string

	mu       sync.Mutex
	accepted int  // rounds answered 202, the first ones
	unknown  bool // the round after them may or may not have reached Kafka
	cancel   context.CancelFunc
	done     chan struct{}
}

func startFleetLoad(t *testing.T, api string, sensors []string) *fleetLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &fleetLoad{api: api, sensors: sensors, cancel: cancel, done: make(chan struct{})}
	go l.run(ctx)
	t.Cleanup(l.stop)
	return l
}

func (l *fleetLoad) run(ctx context.Context) {
	defer close(l.done)
	// A connection per request: once the listener is closed, a round is
	// refused at dialling, known not to be sent, rather than cut on a kept-alive
	// connection the server closed.
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	for round := 0; ctx.Err() == nil; round++ {
		readings := make([]map[string]any, len(l.sensors))
		for i, s := range l.sensors {
			readings[i] = map[string]any{"sensor_id": s, "data": round % 2}
		}
		body, _ := json.Marshal(readings)
		req, err := http.NewRequestWithContext(ctx, "POST", l.api+"/v1/readings", bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+deliveryIngestToken)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		l.mu.Lock()
		if err != nil || resp.StatusCode != http.StatusAccepted {
			var opErr *net.OpError
			refused := errors.As(err, &opErr) && opErr.Op == "dial"
			l.unknown = ctx.Err() == nil && !refused
			l.mu.Unlock()
			return
		}
		l.accepted++
		l.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond): // the fleet's pace, not a wait on lockstream
		}
	}
}

func (l *fleetLoad) stop() {
	l.cancel()
	<-l.done
}

// rounds returns the rounds accepted so far and whether the one after them
// may have reached Kafka too.
func (l *fleetLoad) rounds() (accepted int, unknown bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.accepted, l.unknown
}

// probe answers GET path's status, or 0 and the error when nothing answers.
func probe(url string) (int, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

var daemonLogRE = regexp.MustCompile(`msg="daemon (starting|stopped)" daemon=([\w-]+)`)

// daemonOrder returns the daemons of a process's log in the order they started
// and in the order they stopped.
func daemonOrder(out string) (started, stopped []string) {
	for _, m := range daemonLogRE.FindAllStringSubmatch(out, -1) {
		if m[1] == "starting" {
			started = append(started, m[2])
		} else {
			stopped = append(stopped, m[2])
		}
	}
	return started, stopped
}

// TestProcessSIGTERMDrainsUnderLoad: SIGTERM to `lockstream all` while a fleet
// keeps posting readings. /readyz answers 503 soon after the signal while
// /healthz still answers on the same listener; the listener closes once the
// shutdown delay is over; the daemons stop in reverse order of start and the
// process exits 0. After a restart every reading accepted (202) — before the
// signal, and during the delay — is applied to sensor_state, every change is
// in the client's feed, and each sensor's newest state reached its webhook.
func TestProcessSIGTERMDrainsUnderLoad(t *testing.T) {
	t.Parallel()
	const fleet = 40
	n := startDeliveryNode(t, []string{"all"}, "LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true",
		// Every reading is a change: none is held as flapping.
		"LOCKSTREAM_FLAP_CHANGES=1000000",
		// A delay the test's polls cannot miss, a timeout no loaded machine hits.
		"LOCKSTREAM_SHUTDOWN_DELAY=8s", "LOCKSTREAM_SHUTDOWN_TIMEOUT=100s")
	sink := startBodySink(t)
	sensors := make([]string, fleet)
	for i := range sensors {
		sensors[i] = fmt.Sprintf("sd%02d", i)
	}
	clientID, secret := n.watcher("shutdown watcher", sink.server.URL, sensors...)
	sink.setSecret(secret)

	load := startFleetLoad(t, n.api, sensors)
	// The whole pipeline is flowing: webhooks come out of the other end.
	sink.waitAccepted(n, 2*fleet)

	all := n.procs["all"]
	before, _ := load.rounds()
	all.signal(syscall.SIGTERM)
	n.h.waitFor("/readyz to answer 503 after SIGTERM", func() (bool, string) {
		code, err := probe(n.api + "/readyz")
		if err != nil {
			t.Fatalf("/readyz did not answer after SIGTERM (the listener closed before readiness turned off?): %v", err)
		}
		return code == http.StatusServiceUnavailable, fmt.Sprintf("readyz %d", code)
	})
	if code, err := probe(n.api + "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while draining: %d %v, want 200 from the listener still serving", code, err)
	}
	n.h.waitFor("the listener to close after the shutdown delay", func() (bool, string) {
		code, err := probe(n.api + "/healthz")
		return err != nil, fmt.Sprintf("healthz still answers %d", code)
	})
	if code := all.waitExit(); code != 0 {
		t.Fatalf("lockstream all exited %d after SIGTERM, want 0:\n%s", code, tail(all.out.String(), 4000))
	}
	load.stop()
	accepted, unknown := load.rounds()
	t.Logf("rounds of %d readings accepted: %d before the signal, %d during the delay; then one of unknown fate: %v",
		fleet, before, accepted-before, unknown)

	started, stopped := daemonOrder(all.out.String())
	slices.Reverse(started)
	if !slices.Equal(started, stopped) {
		t.Errorf("daemons stopped in the order %v, want the reverse of their start: %v", stopped, started)
	}

	n.start("all")
	n.h.waitFor("the restarted API to be ready", func() (bool, string) {
		code, err := probe(n.api + "/readyz")
		return code == http.StatusOK, fmt.Sprintf("readyz %d %v", code, err)
	})
	// Round r set every sensor to r%2; an unknown last round may have landed too.
	last := (accepted - 1) % 2
	n.h.waitFor("every accepted reading in sensor_state", func() (bool, string) {
		states := storagetest.AllSensorStates(t, n.stores.PostgresURL)
		if len(states) != fleet {
			return false, fmt.Sprintf("%d sensors have a state", len(states))
		}
		for _, s := range states {
			if s.Data != last && !unknown {
				return false, fmt.Sprintf("%s is %d, want %d", s.SensorID, s.Data, last)
			}
		}
		return true, ""
	})
	// Every change reached the client: each is in its feed (the outbox, numbered
	// by seq), and the newest state of each sensor came by webhook. Older changes
	// still undelivered when a newer one waited are SUPERSEDED by design
	// (DESIGN.md "Guarantees"), so not every change is a webhook of its own.
	n.h.waitFor("every change in the client's feed", func() (bool, string) {
		changes := map[string]int{}
		for _, e := range n.feed(clientID) {
			if e.Type == "state_changed" {
				changes[e.Sensor.ID]++
			}
		}
		for _, s := range sensors {
			if changes[s] < accepted {
				return false, fmt.Sprintf("%s: %d changes in the feed of %d accepted", s, changes[s], accepted)
			}
		}
		return true, ""
	})
	n.h.waitFor("each sensor's newest state delivered by webhook", func() (bool, string) {
		got, _, bad := sink.snapshot()
		if len(bad) > 0 {
			t.Fatalf("bad webhooks: %v", bad)
		}
		newest := map[string]int64{}
		for _, b := range got {
			if b.Type == "state_changed" && b.Data != nil && *b.Data == last {
				newest[b.Sensor.ID] = max(newest[b.Sensor.ID], b.Seq)
			}
		}
		for _, s := range sensors {
			if newest[s] == 0 {
				return false, fmt.Sprintf("no webhook of %s's state %d yet (%d webhooks)", s, last, len(got))
			}
		}
		return true, ""
	})
	// Nothing came that was not sent: at most the round of unknown fate beyond,
	// and every webhook is an event of the feed.
	feed := map[string]fleetBody{}
	perSensor := map[string]int{}
	for _, e := range n.feed(clientID) {
		feed[e.ID] = e
		perSensor[e.Sensor.ID]++
	}
	for _, s := range sensors {
		if limit := accepted + btoi(unknown); perSensor[s] > limit {
			t.Errorf("%s: %d events in the feed, want at most %d", s, perSensor[s], limit)
		}
	}
	got, _, _ := sink.snapshot()
	for _, b := range got {
		if e, ok := feed[b.ID]; !ok || e.Seq != b.Seq {
			t.Errorf("webhook %+v is not the feed's %+v", b, e)
		}
	}
	t.Logf("%d events in the feed, %d delivered by webhook (the rest superseded)", len(feed), len(got))
}

// feed returns every event of the client's reconcile feed, in seq order.
func (n *deliveryNode) feed(clientID string) []fleetBody {
	n.t.Helper()
	var out []fleetBody
	after := int64(0)
	for {
		page := n.call("GET", fmt.Sprintf("/v1/clients/%s/events?after=%d&limit=1000", clientID, after), deliveryAdminToken, nil, http.StatusOK)
		raw, err := json.Marshal(page["items"])
		if err != nil {
			n.t.Fatal(err)
		}
		var items []fleetBody
		if err := json.Unmarshal(raw, &items); err != nil {
			n.t.Fatal(err)
		}
		out = append(out, items...)
		next, ok := page["next_after"].(float64)
		if !ok {
			return out
		}
		after = int64(next)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestProcessSecondSignalExitsAtOnce: a second SIGTERM during the shutdown
// delay ends `lockstream all` at once, with a non-zero status.
func TestProcessSecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	// A delay the test would never wait out.
	n := startDeliveryNode(t, []string{"all"}, "LOCKSTREAM_SHUTDOWN_DELAY=1h")
	all := n.procs["all"]
	all.signal(syscall.SIGTERM)
	n.h.waitFor("/readyz to answer 503 after the first SIGTERM", func() (bool, string) {
		code, err := probe(n.api + "/readyz")
		return code == http.StatusServiceUnavailable, fmt.Sprintf("readyz %d %v", code, err)
	})
	all.signal(syscall.SIGTERM)
	if code := all.waitExit(); code == 0 {
		t.Fatalf("lockstream all exited 0 after a second SIGTERM, want non-zero:\n%s", tail(all.out.String(), 4000))
	}
}
