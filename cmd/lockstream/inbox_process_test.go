package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/storage/storagetest"
)

// The inbox process tests run lockstream as processes (see startDeliveryNode)
// and act as members would: through the HTTP API and the live stream.

// sseEvent is one server-sent event and when its last line was read.
type sseEvent struct {
	id, event, data string
	at              time.Time
}

// liveStream reads one member's stream in the background.
type liveStream struct {
	t      *testing.T
	events chan sseEvent
	cancel context.CancelFunc
	done   chan struct{}
	// urls are the URLs the member used to open it: the ticket's and the
	// stream's.
	urls []string
}

// openLiveStream takes a ticket from api with the member's token and opens the
// stream on streamAPI (the same API or another process).
func openLiveStream(t *testing.T, api, streamAPI, token string) *liveStream {
	t.Helper()
	ticketURL := api + "/v1/stream/tickets"
	req, _ := http.NewRequest("POST", ticketURL, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ticket struct {
		Ticket string `json:"ticket"`
	}
	err = json.NewDecoder(resp.Body).Decode(&ticket)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || ticket.Ticket == "" {
		t.Fatalf("POST /v1/stream/tickets: %d %v", resp.StatusCode, err)
	}
	streamURL := streamAPI + "/v1/stream?ticket=" + url.QueryEscape(ticket.Ticket)
	if strings.Contains(streamURL, token) {
		t.Fatalf("the stream URL %s carries the member's token", streamURL)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sreq, _ := http.NewRequestWithContext(ctx, "GET", streamURL, nil)
	sresp, err := http.DefaultClient.Do(sreq)
	if err != nil {
		cancel()
		t.Fatalf("opening the stream: %v", err)
	}
	if sresp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET /v1/stream: %s", sresp.Status)
	}
	s := &liveStream{t: t, events: make(chan sseEvent, 1000), cancel: cancel, done: make(chan struct{}),
		urls: []string{ticketURL, streamURL}}
	go func() {
		defer close(s.done)
		defer close(s.events)
		defer sresp.Body.Close()
		sc := bufio.NewScanner(sresp.Body)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.event != "" {
					e.at = time.Now()
					s.events <- e
				}
				e = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				e.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				e.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				e.data = line[6:]
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *liveStream) close() {
	s.cancel()
	<-s.done
}

func (s *liveStream) next() sseEvent {
	s.t.Helper()
	select {
	case e, ok := <-s.events:
		if !ok {
			s.t.Fatal("the stream ended")
		}
		return e
	case <-time.After(processWait):
		s.t.Fatalf("no stream event within %v", processWait)
	}
	return sseEvent{}
}

// streamMessage is a message as the stream and the inbox show it.
type streamMessage struct {
	ID     string `json:"id"`
	Seq    int64  `json:"seq"`
	Type   string `json:"type"`
	Sensor *struct {
		ID string `json:"id"`
	} `json:"sensor"`
	Data    *int   `json:"data"`
	Seen    bool   `json:"seen"`
	Cause   string `json:"cause"`
	Subject string `json:"subject"`
	// arrived is when the stream delivered it (not in the JSON).
	arrived time.Time
}

// hello reads the first event and returns its acked_seq and last_seq.
func (s *liveStream) hello() (acked, last int64) {
	s.t.Helper()
	e := s.next()
	var h struct {
		Epoch    string `json:"epoch"`
		AckedSeq int64  `json:"acked_seq"`
		LastSeq  int64  `json:"last_seq"`
	}
	if e.event != "hello" || json.Unmarshal([]byte(e.data), &h) != nil || h.Epoch == "" {
		s.t.Fatalf("first event %+v, want hello", e)
	}
	return h.AckedSeq, h.LastSeq
}

// expect reads len(seqs) messages, which must have those seqs in that order.
func (s *liveStream) expect(seqs ...int64) []streamMessage {
	s.t.Helper()
	var got []streamMessage
	for _, want := range seqs {
		e := s.next()
		var m streamMessage
		if e.event != "message" || json.Unmarshal([]byte(e.data), &m) != nil || e.id != fmt.Sprint(m.Seq) {
			s.t.Fatalf("event %+v, want message %d", e, want)
		}
		if m.Seq != want {
			s.t.Fatalf("stream message seq %d after %d messages, want %d (seqs %v)", m.Seq, len(got), want, seqs)
		}
		m.arrived = e.at
		got = append(got, m)
	}
	return got
}

// inbox lists the member's messages (query appended to /v1/messages).
func (n *deliveryNode) inbox(token, query string) (int, []streamMessage) {
	n.t.Helper()
	body := n.call("GET", "/v1/messages"+query, token, nil, http.StatusOK)
	total := int(body["total"].(float64))
	raw, _ := json.Marshal(body["messages"])
	var ms []streamMessage
	_ = json.Unmarshal(raw, &ms)
	return total, ms
}

func seqsOf(ms []streamMessage) []int64 {
	var out []int64
	for _, m := range ms {
		out = append(out, m.Seq)
	}
	return out
}

// TestInboxAndStreamThroughAll follows flips of a linked sensor through
// `lockstream all` into a member's inbox and live stream: seq 1..n in order;
// replay after the acknowledged seq; live messages without duplicate; the inbox
// routes; another member's message a 404; the admin with ?user=; no URL a member
// uses carries a member id. It logs how long each live message took from its
// flip to the stream (a figure, not a check: speed belongs in benchmarks, see
// BenchmarkStreamLatency).
func TestInboxAndStreamThroughAll(t *testing.T) {
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(receiver.Close)
	// Ten flips within a minute would make the sensor unstable (its later
	// changes held): this test follows every change.
	n := startDeliveryNode(t, []string{"all"}, "LOCKSTREAM_WEBHOOK_ALLOW_PRIVATE=true", "LOCKSTREAM_FLAP_CHANGES=1000")
	const sensor = "inboxDoor"
	clientID, _ := n.watcher("home", receiver.URL, sensor)
	alice := n.call("POST", "/v1/clients/"+clientID+"/members", deliveryAdminToken, map[string]any{"name": "Alice"}, http.StatusCreated)
	bob := n.call("POST", "/v1/clients/"+clientID+"/members", deliveryAdminToken, map[string]any{"name": "Bob"}, http.StatusCreated)
	aliceToken, bobToken, aliceID := alice["token"].(string), bob["token"].(string), alice["id"].(string)
	bobID := bob["id"].(string)
	var memberURLs []string // every URL called with a member's token
	n.onCall = func(_, u, token string) {
		if token == aliceToken || token == bobToken {
			memberURLs = append(memberURLs, u)
		}
	}

	s := openLiveStream(t, n.api, n.api, aliceToken)
	memberURLs = append(memberURLs, s.urls...)
	if acked, last := s.hello(); acked != 0 || last != 0 {
		t.Fatalf("hello of an empty inbox: acked %d last %d", acked, last)
	}
	// liveFlip flips the sensor and reads the message it makes on the stream,
	// noting how long it took from the reading's POST.
	var latencies []time.Duration
	liveFlip := func(data int, seq int64) streamMessage {
		t.Helper()
		start := time.Now()
		n.flip(sensor, data)
		m := s.expect(seq)[0]
		latencies = append(latencies, m.arrived.Sub(start))
		return m
	}
	flips := []int{1, 0, 1, 0, 1}
	for i, data := range flips {
		// Each flip reaches the stream, in order, before the next is made.
		m := liveFlip(data, int64(i+1))
		if m.Type != "state_changed" || m.Sensor == nil || m.Sensor.ID != sensor || *m.Data != data || m.Cause != "event" {
			t.Fatalf("stream message %d: %+v", i+1, m)
		}
	}
	total, ms := n.inbox(aliceToken, "?sort-dir=asc")
	if total != 5 || !slices.Equal(seqsOf(ms), []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("alice's inbox: %d %v", total, seqsOf(ms))
	}
	for i, m := range ms {
		if *m.Data != flips[i] {
			t.Fatalf("inbox message %d has data %d, want %d", m.Seq, *m.Data, flips[i])
		}
	}

	// Away after acknowledging 5: three flips; back: exactly those three, then live.
	n.call("POST", "/v1/stream/ack", aliceToken, map[string]any{"seq": 5}, http.StatusNoContent)
	s.close()
	for _, data := range []int{0, 1, 0} {
		n.flip(sensor, data)
	}
	n.h.waitFor("alice's inbox to hold 8 messages", func() (bool, string) {
		total, _ := n.inbox(aliceToken, "?count-only=true")
		return total == 8, fmt.Sprintf("%d messages", total)
	})
	s = openLiveStream(t, n.api, n.api, aliceToken)
	memberURLs = append(memberURLs, s.urls...)
	if acked, last := s.hello(); acked != 5 || last != 8 {
		t.Fatalf("hello after the ack: acked %d last %d", acked, last)
	}
	s.expect(6, 7, 8)
	liveFlip(1, 9)
	liveFlip(0, 10)
	var slowest time.Duration
	for i, d := range latencies {
		t.Logf("live message %d of %d: %v from the reading's POST to the stream", i+1, len(latencies), d)
		slowest = max(slowest, d)
	}
	t.Logf("live messages: %d, slowest %v from the reading's POST to the stream", len(latencies), slowest)

	// The inbox routes through the running system.
	total, ms = n.inbox(aliceToken, "?message-type=state_changed&limit=3")
	if total != 10 || !slices.Equal(seqsOf(ms), []int64{10, 9, 8}) {
		t.Fatalf("newest first, 3 of them: %d %v", total, seqsOf(ms))
	}
	n.call("GET", "/v1/messages?sort-field=colour", aliceToken, nil, http.StatusBadRequest)
	byseq := map[int64]string{}
	for _, m := range mustInbox(n, aliceToken, "?seen=true") {
		byseq[m.Seq] = m.ID
	}
	n.call("POST", "/v1/messages/"+byseq[1]+"/seen", aliceToken, nil, http.StatusNoContent)
	n.call("POST", "/v1/messages/seen", aliceToken, map[string]any{"ids": []string{byseq[2], byseq[3]}}, http.StatusNoContent)
	if total, _ := n.inbox(aliceToken, "?count-only=true"); total != 7 {
		t.Fatalf("unseen after marking 3 seen: %d", total)
	}
	n.call("POST", "/v1/messages/"+byseq[2]+"/unseen", aliceToken, nil, http.StatusNoContent)
	n.call("DELETE", "/v1/messages/"+byseq[4], aliceToken, nil, http.StatusNoContent)
	if total, _ := n.inbox(aliceToken, "?count-only=true"); total != 7 {
		t.Fatalf("unseen after unseen 1 and delete 1: %d", total)
	}
	if total, _ := n.inbox(aliceToken, "?count-only=true&seen=true"); total != 9 {
		t.Fatalf("all but the deleted: %d", total)
	}
	n.call("GET", "/v1/messages/"+byseq[4], aliceToken, nil, http.StatusNotFound)
	n.call("GET", "/v1/messages/"+byseq[5], bobToken, nil, http.StatusNotFound)
	n.call("GET", "/v1/messages/"+byseq[5]+"?user="+aliceID, deliveryAdminToken, nil, http.StatusOK)
	n.call("POST", "/v1/messages/seen?user="+aliceID, deliveryAdminToken, map[string]any{"all_notifications": true}, http.StatusNoContent)
	if total, _ := n.inbox(aliceToken, "?count-only=true"); total != 0 {
		t.Fatalf("unseen after all_notifications: %d", total)
	}
	n.call("POST", "/v1/messages/delete", aliceToken, map[string]any{"all_notifications": true}, http.StatusNoContent)
	if total, _ := n.inbox(aliceToken, "?count-only=true&seen=true"); total != 0 {
		t.Fatalf("left after deleting all: %d", total)
	}
	if total, _ := n.inbox(bobToken, "?count-only=true"); total != 10 {
		t.Fatalf("bob's inbox: %d, want his 10 unseen", total)
	}

	// No URL a member used carries a member id (nor a token): the admin's
	// ?user= is the admin's.
	for _, u := range memberURLs {
		for _, secret := range []string{aliceID, bobID, aliceToken, bobToken} {
			if strings.Contains(strings.ToLower(u), strings.ToLower(secret)) {
				t.Errorf("a URL a member used, %s, carries %s", u, secret)
			}
		}
	}
	t.Logf("%d URLs used by members, none with a member id or token", len(memberURLs))
}

func mustInbox(n *deliveryNode, token, query string) []streamMessage {
	n.t.Helper()
	_, ms := n.inbox(token, query)
	return ms
}

// TestStreamAcrossAPIProcesses connects a member to one `api` process and records
// notifications through another: the stream gets each, because every process
// hears every commit on Postgres (LISTEN/NOTIFY).
func TestStreamAcrossAPIProcesses(t *testing.T) {
	stores := storagetest.New(t)
	kafka := privateKafka(t)
	apis := make([]string, 2)
	for i := range apis {
		addr := freeAddr(t)
		h := newHarness(t, append(storeSettings(kafka, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL, stores.RedisPrefix),
			"LOCKSTREAM_HTTP_ADDR="+addr, "LOCKSTREAM_ADMIN_TOKEN="+deliveryAdminToken)...)
		h.start(fmt.Sprint("api", i+1), "api")
		apis[i] = "http://" + addr
		h.waitFor("api to be ready", func() (bool, string) {
			resp, err := http.Get(apis[i] + "/readyz")
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status
		})
	}
	first := &deliveryNode{t: t, api: apis[0]}
	c := first.call("POST", "/v1/clients", deliveryAdminToken, map[string]any{"name": "x", "webhook_url": "https://example.com/h"}, http.StatusCreated)
	m := first.call("POST", "/v1/clients/"+c["id"].(string)+"/members", deliveryAdminToken, map[string]any{"name": "Alice"}, http.StatusCreated)

	s := openLiveStream(t, apis[0], apis[1], m["token"].(string))
	for _, u := range s.urls {
		if strings.Contains(strings.ToLower(u), strings.ToLower(m["id"].(string))) {
			t.Errorf("the member's URL %s carries its id", u)
		}
	}
	s.hello()
	for i := range 3 {
		first.call("POST", "/v1/notifications", deliveryAdminToken, map[string]any{"member_id": m["id"],
			"type": "note", "subject": fmt.Sprint("note ", i+1)}, http.StatusAccepted)
		if got := s.expect(int64(i + 1))[0]; got.Subject != fmt.Sprint("note ", i+1) || got.Sensor != nil {
			t.Fatalf("message %d on the second api: %+v", i+1, got)
		}
	}
}
