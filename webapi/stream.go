package webapi

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/webapi/live"
)

// Defaults of InboxConfig, and the contract's fixed values.
const (
	DefaultNewMemberWindow    = 24 * time.Hour
	DefaultStreamPing         = 15 * time.Second
	DefaultStreamBuffer       = 64
	DefaultStreamWriteTimeout = 10 * time.Second
	DefaultStreamFetchBatch   = 500
	DefaultStreamListenRetry  = time.Second
	DefaultMemberTokenIdle    = registry.DefaultMemberTokenIdle
	// NewMemberMaxMessages bounds the messages a new member is given.
	NewMemberMaxMessages = 20
	// StreamTicketTTL is how long a stream ticket opens a stream.
	StreamTicketTTL = 60 * time.Second
)

// InboxConfig configures the member, inbox and live stream routes.
type InboxConfig struct {
	// NewMemberWindow is how far back a new member's inbox is filled with the
	// client's messages (at most NewMemberMaxMessages of them). Defaults to
	// DefaultNewMemberWindow (24h).
	NewMemberWindow time.Duration
	// StreamPing is the interval of the keep-alive comments of a stream.
	// Defaults to DefaultStreamPing (15s).
	StreamPing time.Duration
	// StreamBuffer is how many messages may wait for one stream's writer; the
	// hub reads no more for a stream whose buffer is full. Defaults to
	// DefaultStreamBuffer (64).
	StreamBuffer int
	// StreamWriteTimeout bounds each write to a stream: a reader that does not
	// take its messages within it is cut off and resumes by replay. Defaults to
	// DefaultStreamWriteTimeout (10s).
	StreamWriteTimeout time.Duration
	// StreamFetchBatch is how many streams one read of the inbox serves.
	// Defaults to DefaultStreamFetchBatch (500).
	StreamFetchBatch int
	// ListenRetry is the pause before listening again, or reading again, after a
	// failure. Defaults to DefaultStreamListenRetry (1s).
	ListenRetry time.Duration
	// MemberTokenIdle: a member token unused for this long stops working (401
	// naming the rotation route) until rotated. Defaults to
	// DefaultMemberTokenIdle (60 days).
	MemberTokenIdle time.Duration
}

// WithDefaults returns a copy of c with every zero field at its default.
func (c InboxConfig) WithDefaults() InboxConfig {
	c.NewMemberWindow = cmp.Or(c.NewMemberWindow, DefaultNewMemberWindow)
	c.StreamPing = cmp.Or(c.StreamPing, DefaultStreamPing)
	c.StreamBuffer = cmp.Or(c.StreamBuffer, DefaultStreamBuffer)
	c.StreamWriteTimeout = cmp.Or(c.StreamWriteTimeout, DefaultStreamWriteTimeout)
	c.StreamFetchBatch = cmp.Or(c.StreamFetchBatch, DefaultStreamFetchBatch)
	c.ListenRetry = cmp.Or(c.ListenRetry, DefaultStreamListenRetry)
	c.MemberTokenIdle = cmp.Or(c.MemberTokenIdle, DefaultMemberTokenIdle)
	return c
}

// Validate reports every field of c that cannot work, by name.
func (c InboxConfig) Validate() error {
	var errs []error
	for _, d := range []struct {
		name  string
		value time.Duration
	}{
		{"NewMemberWindow", c.NewMemberWindow}, {"StreamPing", c.StreamPing},
		{"StreamWriteTimeout", c.StreamWriteTimeout}, {"ListenRetry", c.ListenRetry},
		{"MemberTokenIdle", c.MemberTokenIdle},
	} {
		if d.value <= 0 {
			errs = append(errs, fmt.Errorf("webapi: %s must be positive, got %s", d.name, d.value))
		}
	}
	if c.StreamBuffer < 1 {
		errs = append(errs, fmt.Errorf("webapi: StreamBuffer must be at least 1, got %d", c.StreamBuffer))
	}
	if c.StreamFetchBatch < 1 {
		errs = append(errs, fmt.Errorf("webapi: StreamFetchBatch must be at least 1, got %d", c.StreamFetchBatch))
	}
	return errors.Join(errs...)
}

// StreamTickets keeps the single-use tickets that open streams
// (storage.Redis).
type StreamTickets interface {
	CreateStreamTicket(ctx context.Context, ticket, memberID string, ttl time.Duration) error
	TakeStreamTicket(ctx context.Context, ticket string) (string, error)
}

// WithInbox serves members (from members), their inboxes, free-form
// notifications and the live stream (from inbox, with tickets in tickets).
// Without it those routes answer 503. Run (or RunStreams) feeds the streams.
func WithInbox(members MemberStore, inbox InboxStore, tickets StreamTickets, cfg InboxConfig) Option {
	return func(s *Server) {
		s.members, s.inbox, s.tickets, s.inboxCfg = members, inbox, tickets, cfg
	}
}

// RunStreams feeds the live streams of this server until ctx ends, then ends
// them. Serve runs it; call it only when serving Handler some other way. It
// returns at once on a server without WithInbox.
func (s *Server) RunStreams(ctx context.Context) error {
	if s.hub == nil {
		return nil
	}
	return s.hub.Run(ctx)
}

// ticketBody is the answer of POST /v1/stream/tickets.
type ticketBody struct {
	Ticket    string `json:"ticket"`
	ExpiresIn int    `json:"expires_in"`
}

// createStreamTicket handles POST /v1/stream/tickets (a member token): a
// single-use ticket that opens the member's stream within StreamTicketTTL, so
// that the stream's URL carries neither the member nor its token.
func (s *Server) createStreamTicket(w http.ResponseWriter, r *http.Request) error {
	if s.tickets == nil || s.hub == nil {
		return unavailable("the live stream is disabled: the server has no ticket store")
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	ticket := base64.RawURLEncoding.EncodeToString(b)
	if err := s.tickets.CreateStreamTicket(r.Context(), ticket, actingMember(r), StreamTicketTTL); err != nil {
		return fmt.Errorf("creating a stream ticket: %w", err)
	}
	w.Header().Set("Cache-Control", "no-store")
	return httpapi.WriteJSON(w, http.StatusOK, ticketBody{Ticket: ticket, ExpiresIn: int(StreamTicketTTL / time.Second)})
}

// ackStream handles POST /v1/stream/ack {"seq": n}: the member's stream received
// everything up to n; its next connection replays what follows.
func (s *Server) ackStream(w http.ResponseWriter, r *http.Request) error {
	if s.inbox == nil {
		return membersDisabled()
	}
	if err := onlyUserParameter(r); err != nil {
		return err
	}
	var req struct {
		Seq *int64 `json:"seq"`
	}
	if err := s.decodeJSON(w, r, &req); err != nil {
		return err
	}
	var errs httpapi.FieldErrors
	switch {
	case req.Seq == nil:
		errs.Add("seq", "is required")
	case *req.Seq < 0:
		errs.Add("seq", "must be 0 or more, got %d", *req.Seq)
	}
	if err := errs.Err(); err != nil {
		return err
	}
	err := s.inbox.AckInbox(r.Context(), actingMember(r), *req.Seq)
	if errors.Is(err, inbox.ErrSeqAhead) {
		errs.Add("seq", "%d is beyond the newest message", *req.Seq)
		return errs.Err()
	}
	if err != nil {
		return fmt.Errorf("acknowledging: %w", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// helloBody is the first event of every stream.
type helloBody struct {
	Epoch    string `json:"epoch"`
	AckedSeq int64  `json:"acked_seq"`
	LastSeq  int64  `json:"last_seq"`
}

// resetBody tells a client that what it asked for is gone: reload from GET
// /v1/messages; the stream goes on after LastSeq.
type resetBody struct {
	Epoch   string `json:"epoch"`
	LastSeq int64  `json:"last_seq"`
}

// openStream handles GET /v1/stream?ticket=…, the member's live stream
// (server-sent events): hello, then a reset when the messages asked for are
// gone, then every message after the acknowledged seq (or Last-Event-ID) in seq
// order, replayed ones first and live ones as they come, with a ping comment
// every StreamPing.
func (s *Server) openStream(w http.ResponseWriter, r *http.Request) error {
	if s.tickets == nil || s.hub == nil {
		return unavailable("the live stream is disabled: the server has no ticket store")
	}
	if !s.hub.Running() {
		return unavailable("the live stream is not running on this server")
	}
	q := r.URL.Query()
	ticket := q.Get("ticket")
	if len(q) != 1 || ticket == "" {
		return httpapi.InvalidParameter("GET /v1/stream takes one parameter, ticket (from POST /v1/stream/tickets)")
	}
	var after *int64
	if raw := r.Header.Get("Last-Event-ID"); raw != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if err != nil || n < 0 {
			return httpapi.InvalidParameter("Last-Event-ID must be a seq (an integer of 0 or more), got %q", raw)
		}
		after = &n
	}
	member, err := s.tickets.TakeStreamTicket(r.Context(), ticket)
	if errors.Is(err, storage.ErrNotFound) {
		return httpapi.NewProblem(http.StatusUnauthorized, httpapi.ProblemUnauthorized,
			"the ticket is unknown, expired or already used: get a new one from POST /v1/stream/tickets")
	}
	if err != nil {
		return fmt.Errorf("taking a stream ticket: %w", err)
	}
	state, err := s.inbox.GetInboxState(r.Context(), member)
	if errors.Is(err, storage.ErrNotFound) {
		return httpapi.NewProblem(http.StatusUnauthorized, httpapi.ProblemUnauthorized, "the ticket's member no longer exists")
	}
	if err != nil {
		return fmt.Errorf("reading the inbox state: %w", err)
	}
	pos := state.AckedSeq
	if after != nil {
		pos = *after
	}
	// Asked for messages that are gone (retention), or for a future it cannot
	// have seen: reload, then go on from the newest.
	reset := pos > state.LastSeq || (pos < state.LastSeq && (state.FirstSeq == 0 || state.FirstSeq > pos+1))
	if reset {
		pos = state.LastSeq
	}
	return s.serveStream(w, r, member, state, pos, reset)
}

// streamHeader is the head of a hijacked stream's answer. The body ends when
// the connection closes (no chunking: nothing but the stream ever uses the
// connection again).
const streamHeader = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n" +
	"X-Accel-Buffering: no\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n"

// serveStream writes the stream until the client leaves, a write times out or
// the hub stops.
//
// It takes the connection over from net/http (Hijack) and hands it to a
// goroutine of its own, returning from the handler: net/http's connection
// goroutine (whose stack grew on the way through the router and the stores)
// and its read and write buffers are then freed, which more than halves what
// an idle stream costs. Where the connection cannot be taken over (HTTP/2), the
// stream is served through the ResponseWriter instead. Either way the server's
// read and write deadlines are lifted (a WriteTimeout must not end streams) and
// each write gets StreamWriteTimeout instead.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, member string, state inbox.State,
	pos int64, reset bool) error {
	head := appendEvent(nil, "", "hello", helloBody{Epoch: state.Epoch, AckedSeq: state.AckedSeq, LastSeq: state.LastSeq})
	if reset {
		s.streamMetrics.resets.Inc()
		head = appendEvent(head, strconv.FormatInt(state.LastSeq, 10), "reset",
			resetBody{Epoch: state.Epoch, LastSeq: state.LastSeq})
	}
	rc := http.NewResponseController(w)
	conn, _, err := rc.Hijack()
	if err == nil {
		// The buffered reader may hold a pipelined request: it is dropped with the
		// connection's other state, since the stream answers with Connection: close.
		sink := connSink{conn: conn, timeout: s.inboxCfg.StreamWriteTimeout}
		if err := errors.Join(conn.SetDeadline(time.Time{}), sink.send(append([]byte(streamHeader), head...))); err != nil {
			_ = conn.Close()
			return nil // the client left before hello; nothing to report
		}
		now := s.newNowWriter(conn)
		sub := s.hub.Subscribe(member, pos, state.LastSeq, now.writer())
		go func() {
			defer func() { _ = conn.Close() }()
			defer s.hub.Unsubscribe(sub)
			s.pump(sub, sink, member, nil, now)
		}()
		return nil
	}
	if !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("taking over the stream's connection: %w", err)
	}

	if err := errors.Join(rc.SetReadDeadline(time.Time{}), rc.SetWriteDeadline(time.Time{})); err != nil {
		return fmt.Errorf("lifting the stream's deadlines: %w", err)
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // proxies must not hold events back
	w.WriteHeader(http.StatusOK)
	sink := responseSink{w: w, rc: rc, timeout: s.inboxCfg.StreamWriteTimeout}
	if err := sink.send(head); err != nil {
		return nil
	}
	sub := s.hub.Subscribe(member, pos, state.LastSeq, nil)
	defer s.hub.Unsubscribe(sub)
	s.pump(sub, sink, member, r.Context().Done(), nil)
	return nil
}

// pump writes what the hub queues for sub, what the hub's writes at once left
// unwritten (now, nil when the hub makes none), and a ping every StreamPing,
// until the hub drops the stream, done closes or a write fails (a write that
// times out cuts a slow reader off). Each round goes out in one write, made
// holding the stream's write lock.
func (s *Server) pump(sub *live.Subscriber, sink streamSink, member string, done <-chan struct{}, now *nowWriter) {
	defer func() {
		// Off the handler's goroutine a panic would end the process.
		if v := recover(); v != nil {
			s.logger.Error("live stream panicked", "member", member, "panic", fmt.Sprint(v))
		}
	}()
	ping := time.NewTicker(s.inboxCfg.StreamPing)
	defer ping.Stop()
	var kick <-chan struct{}
	if now != nil {
		kick = now.kick
	}
	for {
		var buf []byte
		taken := 0
		select {
		case m := <-sub.Messages():
			buf = s.appendMessage(buf, sub, m)
			for taken = 1; len(sub.Messages()) > 0; taken++ {
				buf = s.appendMessage(buf, sub, <-sub.Messages())
			}
			s.hub.Drained(sub)
		case <-ping.C:
			buf = append(buf, ": ping\n\n"...)
		case <-kick:
		case <-sub.Gone():
			s.streamMetrics.cutoffs.WithLabelValues("shutdown").Inc()
			return
		case <-done:
			return
		}
		if err := s.sendLocked(sub, sink, now, buf, taken); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				s.streamMetrics.cutoffs.WithLabelValues("slow").Inc()
				s.logger.Info("cut off a stream that does not read", "member", member,
					"timeout", s.inboxCfg.StreamWriteTimeout)
			}
			return
		}
	}
}

// sendLocked writes buf, after what the hub's writes at once left unwritten,
// holding the stream's write lock, and tells the hub the taken messages it held
// are written. It fails when a write at once found the connection broken.
func (s *Server) sendLocked(sub *live.Subscriber, sink streamSink, now *nowWriter, buf []byte, taken int) error {
	sub.Lock()
	defer sub.Unlock()
	if now != nil {
		if now.err != nil {
			return now.err
		}
		if len(now.carry) > 0 {
			buf, now.carry = append(now.carry, buf...), nil
		}
	}
	if len(buf) > 0 {
		if err := sink.send(buf); err != nil {
			return err
		}
	}
	sub.Wrote(taken)
	return nil
}

// nowWriter makes the hub's writes at once (live.Writer) to a stream's
// connection taken over from net/http: each message in one write(2) on the
// non-blocking socket, with no wake-up of the stream's goroutine and no
// deadline to set. What the socket does not take (its buffer is full: a slow
// reader) is kept in carry for the stream's writer (pump), woken by kick, to
// send first, within the write timeout; so is a failure.
type nowWriter struct {
	s    *Server
	conn syscall.RawConn
	kick chan struct{}

	// Guarded by the stream's write lock (live.Subscriber.Lock).
	carry []byte
	err   error
}

// newNowWriter returns the writer at once of a TCP connection; nil for any
// other (a TLS connection's bytes cannot be written to its socket).
func (s *Server) newNowWriter(conn net.Conn) *nowWriter {
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return nil
	}
	return &nowWriter{s: s, conn: raw, kick: make(chan struct{}, 1)}
}

// writer is w's live.Writer; nil for a nil w.
func (w *nowWriter) writer() live.Writer {
	if w == nil {
		return nil
	}
	return w.write
}

func (w *nowWriter) write(sub *live.Subscriber, m *inbox.Message) {
	if w.err != nil {
		return // the stream is ending; its client resumes by replay
	}
	scratch, _ := w.s.frames.Get().(*[]byte)
	if scratch == nil {
		scratch = new([]byte)
	}
	buf := w.s.appendMessage((*scratch)[:0], sub, m)
	*scratch = buf
	defer w.s.frames.Put(scratch)
	if len(w.carry) > 0 { // the writer has yet to send what came before
		w.carry = append(w.carry, buf...)
		w.wake()
		return
	}
	n, err := writeNonBlocking(w.conn, buf)
	switch {
	case n == len(buf):
	case err == nil || errors.Is(err, syscall.EAGAIN):
		w.carry = append(w.carry, buf[n:]...)
		w.s.streamMetrics.unfinished.Inc()
		w.wake()
	default:
		w.err = fmt.Errorf("writing to a stream: %w", err)
		w.wake()
	}
}

func (w *nowWriter) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// writeNonBlocking makes one write(2) of p to the socket (non-blocking, as Go
// opens them) and returns how much it took.
func writeNonBlocking(conn syscall.RawConn, p []byte) (int, error) {
	var (
		n    int
		werr error
	)
	if err := conn.Control(func(fd uintptr) {
		for {
			n, werr = syscall.Write(int(fd), p)
			if !errors.Is(werr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return 0, err
	}
	return max(n, 0), werr
}

// appendMessage adds one message event to buf. A message that came whole in a
// notification is written from its payload's shared rendering (rendered once
// for every stream it goes to) with its own id and seq put in front.
func (s *Server) appendMessage(buf []byte, sub *live.Subscriber, m *inbox.Message) []byte {
	if sub.Replayed(m) {
		s.streamMetrics.sentReplayed.Inc()
	} else {
		s.streamMetrics.sentDirect.Inc()
	}
	if m.Frame == nil {
		return appendEvent(buf, strconv.FormatInt(m.Seq, 10), "message", renderMessage(*m))
	}
	tail := m.Frame.Tail(func() []byte { return messageTail(*m) })
	buf = append(buf, "id: "...)
	buf = strconv.AppendInt(buf, m.Seq, 10)
	buf = append(buf, "\nevent: message\ndata: "...)
	buf = appendMessageHead(buf, m.ID, m.Seq)
	buf = append(buf, tail...)
	return append(buf, "\n\n"...)
}

// messageHeadZero is how a message body with no id and seq begins.
const messageHeadZero = `{"id":"","seq":0,`

// appendMessageHead adds the beginning of a message body: its id (a UUID, which
// JSON needs no escape for) and seq, as renderMessage's JSON has them.
func appendMessageHead(buf []byte, id string, seq int64) []byte {
	buf = append(buf, `{"id":"`...)
	buf = append(buf, id...)
	buf = append(buf, `","seq":`...)
	buf = strconv.AppendInt(buf, seq, 10)
	return append(buf, ',')
}

// messageTail is m's body as renderMessage makes it, but for its beginning (id
// and seq): what the messages of one notification payload share.
func messageTail(m inbox.Message) []byte {
	body := renderMessage(m)
	body.ID, body.Seq = "", 0
	encoded, err := json.Marshal(body)
	if err != nil || !bytes.HasPrefix(encoded, []byte(messageHeadZero)) {
		return []byte(`"type":null}`) // unreachable: a plain struct whose first fields are id and seq
	}
	return encoded[len(messageHeadZero):]
}

// appendEvent adds a server-sent event to buf; data is JSON, on one line.
func appendEvent(buf []byte, id, name string, data any) []byte {
	encoded, err := json.Marshal(data)
	if err != nil {
		encoded = []byte(`null`) // unreachable: the bodies are plain structs
	}
	if id != "" {
		buf = append(buf, "id: "...)
		buf = append(buf, id...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, encoded...)
	return append(buf, "\n\n"...)
}

// streamSink is where a stream's bytes go: each send is written (and flushed)
// within the write timeout.
type streamSink interface {
	send(p []byte) error
}

// connSink writes to a connection taken over from net/http.
type connSink struct {
	conn    net.Conn
	timeout time.Duration
}

func (c connSink) send(p []byte) error {
	if err := c.conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return err
	}
	_, err := c.conn.Write(p)
	return err
}

// responseSink writes through net/http's ResponseWriter.
type responseSink struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (r responseSink) send(p []byte) error {
	if err := r.rc.SetWriteDeadline(time.Now().Add(r.timeout)); err != nil {
		return err
	}
	if _, err := r.w.Write(p); err != nil {
		return err
	}
	return r.rc.Flush()
}
