package webapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/webapi"
)

// A reader that falls behind — it reads nothing for a while, on a small socket
// buffer, so the hub's writes at once find the connection full — still gets
// every message, whole and in seq order: what a write at once could not finish
// the stream's writer sends first, then what was queued, then what the hub
// reads for the stalled stream.
func TestStreamReaderFallingBehindGetsEveryMessageInOrder(t *testing.T) {
	t.Parallel()
	// The reader reads nothing while the 2,000 messages are recorded, which
	// takes longer than the default write timeout (10 s) on a loaded machine,
	// and a stream whose reader does not read for that long is dropped (a
	// promise of its own): here the reader is slow, not gone.
	a := newInboxAPI(t, webapi.InboxConfig{StreamBuffer: 4, StreamWriteTimeout: time.Hour})
	c := a.createClient("acme")
	m := a.createMember(c.ID, map[string]any{"name": "Behind"})
	var ticket struct {
		Ticket string `json:"ticket"`
	}
	a.asMember(m.Token, "POST", "/v1/stream/tickets", nil).expect(http.StatusOK).decode(&ticket)

	u, _ := url.Parse(a.url)
	dialer := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
		return errors.Join(err, serr)
	}}
	conn, err := dialer.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/stream?ticket=%s HTTP/1.1\r\nHost: %s\r\n\r\n", ticket.Ticket, u.Host)
	stream := newSSEReader(t, conn)
	if e := stream.next(); e.event != "hello" {
		t.Fatalf("first event %+v, want hello", e)
	}

	// Each message comes whole in its notification (2.6 KB: under the payload's
	// limit), so the hub writes it at once while the stream is idle: 5.2 MB in all,
	// more than a socket's send buffer grows to (net.ipv4.tcp_wmem: 4 MB).
	const n = 2000
	body := `"` + strings.Repeat("y", 2600) + `"`
	store := inbox.NewPostgresStore(a.stores.Postgres)
	for i := range n {
		if _, err := store.RecordNotification(context.Background(), inbox.FreeFormNotification{
			MemberID: m.ID, Type: "bulk", Subject: fmt.Sprint("m", i+1), Message: json.RawMessage(body)}); err != nil {
			t.Fatal(err)
		}
	}
	// The socket fills either under a write at once (left unfinished for the
	// stream's writer) or, when the hub found the stream's write lock taken and
	// queued instead, under the stream's writer (its buffer then fills: a
	// stall); which, depends on the machine's timing. The hub works after the
	// commits, so wait for it: without either the test proves nothing.
	waitFor(t, "the stream's socket to fill (a write at once left unfinished, or a stall)", func() bool {
		return plainCounter(t, a.registry, "lockstream_stream_unfinished_writes_total")+
			plainCounter(t, a.registry, "lockstream_stream_stalls_total") >= 1
	})
	for i := range n {
		e := stream.next()
		var msg messageJSON
		if e.event != "message" || json.Unmarshal([]byte(e.data), &msg) != nil {
			t.Fatalf("event %d: %s %.80q", i+1, e.event, e.data)
		}
		if msg.Seq != int64(i+1) || e.id != fmt.Sprint(i+1) || msg.Subject != fmt.Sprint("m", i+1) {
			t.Fatalf("event %d: id %s, seq %d, subject %q", i+1, e.id, msg.Seq, msg.Subject)
		}
	}
}

// sseReader reads a stream's events off its connection, failing the test
// when none comes within inboxWait.
type sseReader struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

// newSSEReader reads the response head off conn.
func newSSEReader(t *testing.T, conn net.Conn) *sseReader {
	t.Helper()
	s := &sseReader{t: t, conn: conn, r: bufio.NewReader(conn)}
	for line := ""; line != "\r\n"; {
		line = s.line()
	}
	return s
}

func (s *sseReader) line() string {
	s.t.Helper()
	_ = s.conn.SetReadDeadline(time.Now().Add(inboxWait)) // a hang guard
	line, err := s.r.ReadString('\n')
	if err != nil {
		s.t.Fatalf("reading the stream: %v", err)
	}
	return line
}

// next returns the next event.
func (s *sseReader) next() sseEvent {
	s.t.Helper()
	var e sseEvent
	for {
		switch line := strings.TrimSuffix(s.line(), "\n"); {
		case line == "" && e.event != "":
			return e
		case strings.HasPrefix(line, "id: "):
			e.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			e.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			e.data = line[6:]
		}
	}
}

// plainCounter reads a counter without labels from reg; 0 when absent.
func plainCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
