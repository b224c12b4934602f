package email_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http/httptest"
	netmail "net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/email"
)

// waitFor bounds every wait in these tests: generous, for a loaded 2-core machine.
const waitFor = 60 * time.Second

func intp(v int) *int { return &v }

func stateChanged() notifier.Notification {
	return notifier.Notification{
		ID:            "0b9f6c1e-7d7a-4f4e-9a53-3c2f1d8e5a10",
		EventID:       "0123456789abcdef0123456789abcdef",
		Type:          "state_changed",
		SensorID:      "xa7v9Dfadr7H",
		SensorAddress: "Main St 1 <back door> & co",
		Data:          intp(1),
		Previous:      intp(0),
		At:            time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
		Attempt:       1,
	}
}

// delivered is one message the test server accepted.
type delivered struct {
	from string
	to   []string
	data []byte
	tls  bool
	user string
}

// smtpServer is an in-process SMTP server (go-smtp) on a loopback listener.
type smtpServer struct {
	addr string
	got  chan delivered

	// Replies to answer instead of accepting; nil accepts.
	mailErr, rcptErr, dataErr error
	// users enables AUTH PLAIN with these passwords.
	users map[string]string
}

type smtpOptions struct {
	mailErr, rcptErr, dataErr error
	users                     map[string]string
	// tls, if set, serves TLS from the start (smtps) when implicit, and offers
	// STARTTLS otherwise.
	tls      *tls.Config
	implicit bool
}

func startSMTP(t *testing.T, o smtpOptions) *smtpServer {
	t.Helper()
	s := &smtpServer{got: make(chan delivered, 16), mailErr: o.mailErr, rcptErr: o.rcptErr, dataErr: o.dataErr, users: o.users}
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		_, isTLS := c.TLSConnectionState()
		sess := &session{server: s, tls: isTLS}
		if s.users != nil {
			return &authSession{sess}, nil
		}
		return sess, nil
	}))
	srv.Domain = "localhost"
	srv.ReadTimeout = waitFor
	srv.WriteTimeout = waitFor
	srv.AllowInsecureAuth = o.tls == nil
	srv.TLSConfig = o.tls

	var l net.Listener
	var err error
	if o.implicit {
		l, err = tls.Listen("tcp", "127.0.0.1:0", o.tls)
	} else {
		l, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	served := make(chan struct{})
	go func() {
		defer close(served)
		// Serve returns once Close closes the listener.
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("closing SMTP server: %v", err)
		}
		<-served
	})
	return s
}

func (s *smtpServer) url(scheme string) string { return scheme + "://" + s.addr }

// next returns the next accepted message, failing the test if none arrives.
func (s *smtpServer) next(t *testing.T) delivered {
	t.Helper()
	select {
	case d := <-s.got:
		return d
	case <-time.After(waitFor):
		t.Fatal("no message arrived")
		return delivered{}
	}
}

type session struct {
	server *smtpServer
	tls    bool
	user   string
	cur    delivered
}

func (s *session) Mail(from string, _ *smtp.MailOptions) error {
	if s.server.users != nil && s.user == "" {
		return smtp.ErrAuthRequired
	}
	s.cur = delivered{from: from, tls: s.tls, user: s.user}
	return s.server.mailErr
}

func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.cur.to = append(s.cur.to, to)
	return s.server.rcptErr
}

func (s *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if s.server.dataErr != nil {
		return s.server.dataErr
	}
	s.cur.data = data
	s.server.got <- s.cur
	return nil
}

func (s *session) Reset()        { s.cur = delivered{} }
func (s *session) Logout() error { return nil }

type authSession struct{ *session }

func (s *authSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *authSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if want, ok := s.server.users[user]; !ok || want != pass {
			return &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8}, Message: "bad credentials"}
		}
		s.user = user
		return nil
	}), nil
}

// parsed is a received message taken apart.
type parsed struct {
	header   netmail.Header
	subject  string
	text     string
	html     string
	partKind []string
}

func parse(t *testing.T, data []byte) parsed {
	t.Helper()
	msg, err := netmail.ReadMessage(strings.NewReader(string(data)))
	if err != nil {
		t.Fatalf("reading message: %v\n%s", err, data)
	}
	p := parsed{header: msg.Header}
	if p.subject, err = new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject")); err != nil {
		t.Fatalf("decoding subject: %v", err)
	}
	mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mediaType != "multipart/alternative" {
		t.Fatalf("Content-Type = %q (%v), want multipart/alternative", msg.Header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		part, err := mr.NextPart() // decodes quoted-printable
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading part: %v", err)
		}
		body, err := io.ReadAll(part)
		if err != nil {
			t.Fatalf("reading part body: %v", err)
		}
		kind, _, _ := mime.ParseMediaType(part.Header.Get("Content-Type"))
		p.partKind = append(p.partKind, kind)
		switch kind {
		case "text/plain":
			p.text = string(body)
		case "text/html":
			p.html = string(body)
		}
	}
	return p
}

func newSender(t *testing.T, cfg email.Config) *email.Sender {
	t.Helper()
	s, err := email.New(cfg, nil)
	if err != nil {
		t.Fatalf("email.New: %v", err)
	}
	return s
}

func mustContain(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, s)
		}
	}
}

func TestSendStateChanged(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, smtpOptions{})
	s := newSender(t, email.Config{SMTPURL: srv.url("smtp"), From: "lockstream <alerts@lockstream.test>"})
	n := stateChanged()

	res := s.Send(t.Context(), "owner@example.com", n)
	if res.Outcome != notifier.Sent || res.Err != nil {
		t.Fatalf("result = %+v, want Sent", res)
	}
	d := srv.next(t)
	if d.from != "alerts@lockstream.test" || len(d.to) != 1 || d.to[0] != "owner@example.com" {
		t.Errorf("envelope from %q to %q", d.from, d.to)
	}
	m := parse(t, d.data)
	if got := m.header.Get("Message-Id"); got != "<0b9f6c1e-7d7a-4f4e-9a53-3c2f1d8e5a10@lockstream>" {
		t.Errorf("Message-ID = %q, want <notification-id@lockstream>", got)
	}
	if m.subject != "Sensor xa7v9Dfadr7H is now locked" {
		t.Errorf("Subject = %q", m.subject)
	}
	if got := m.header.Get("To"); got != "<owner@example.com>" && got != "owner@example.com" {
		t.Errorf("To = %q", got)
	}
	if got := m.header.Get("Auto-Submitted"); got != "auto-generated" {
		t.Errorf("Auto-Submitted = %q", got)
	}
	if len(m.partKind) != 2 || m.partKind[0] != "text/plain" || m.partKind[1] != "text/html" {
		t.Fatalf("parts = %v, want text/plain then text/html", m.partKind)
	}
	mustContain(t, "text part", m.text,
		"Sensor xa7v9Dfadr7H (Main St 1 <back door> & co) is now locked.",
		"It was unlocked before.",
		"Sun, 22 Nov 2026 10:00:00 UTC",
		n.ID, n.EventID)
	mustContain(t, "HTML part", m.html,
		"<strong>xa7v9Dfadr7H</strong>",
		"Main St 1 &lt;back door&gt; &amp; co", // escaped, not markup
		"is now <strong>locked</strong>",
		"It was unlocked before.",
		`datetime="2026-11-22T10:00:00Z"`)
	if strings.Contains(m.html, "<back door>") {
		t.Error("the HTML part carries the address unescaped")
	}

	// Unlocked, and a sensor's first reading.
	n.ID, n.Data, n.Previous = "second", intp(0), nil
	if res := s.Send(t.Context(), "owner@example.com", n); res.Outcome != notifier.Sent {
		t.Fatalf("result = %+v, want Sent", res)
	}
	m = parse(t, srv.next(t).data)
	if m.subject != "Sensor xa7v9Dfadr7H is now unlocked" || m.header.Get("Message-Id") != "<second@lockstream>" {
		t.Errorf("subject %q, Message-ID %q", m.subject, m.header.Get("Message-Id"))
	}
	mustContain(t, "text part", m.text, "is now unlocked.", "first state lockstream has received")
	if strings.Contains(m.text, "It was") {
		t.Errorf("a first reading mentions a previous state:\n%s", m.text)
	}
}

func TestSendConnectionEvents(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, smtpOptions{})
	s := newSender(t, email.Config{SMTPURL: srv.url("smtp")})

	lost := stateChanged()
	lost.ID, lost.Type, lost.Previous = "lost-1", "connection_lost", nil
	if res := s.Send(t.Context(), "owner@example.com", lost); res.Outcome != notifier.Sent {
		t.Fatalf("lost: result = %+v", res)
	}
	d := srv.next(t)
	if d.from != email.DefaultFrom {
		t.Errorf("envelope from %q, want the default %q", d.from, email.DefaultFrom)
	}
	m := parse(t, d.data)
	if m.subject != "Sensor xa7v9Dfadr7H lost its connection" {
		t.Errorf("lost subject = %q", m.subject)
	}
	mustContain(t, "lost text", m.text, "has stopped reporting", "lost its connection at Sun, 22 Nov 2026 10:00:00 UTC", "last known state: locked")
	mustContain(t, "lost HTML", m.html, "lost its connection", "last known state: locked")

	restored := stateChanged()
	restored.ID, restored.Type, restored.Data, restored.Previous = "restored-1", "connection_restored", intp(0), nil
	restored.SensorAddress = ""
	if res := s.Send(t.Context(), "owner@example.com", restored); res.Outcome != notifier.Sent {
		t.Fatalf("restored: result = %+v", res)
	}
	m = parse(t, srv.next(t).data)
	if m.subject != "Sensor xa7v9Dfadr7H is back online" {
		t.Errorf("restored subject = %q", m.subject)
	}
	mustContain(t, "restored text", m.text, "is reporting again", "restored at Sun, 22 Nov 2026 10:00:00 UTC", "It is unlocked.", "no address on record")
	mustContain(t, "restored HTML", m.html, "<strong>restored</strong>", "It is <strong>unlocked</strong>.")
	mustContain(t, "severity", m.text, "Severity: info")

	// A restore that knows its loss says how long it lasted.
	since := restored.At.Add(-(2*time.Hour + 14*time.Minute + 5*time.Second))
	restored.ID, restored.LostSince = "restored-2", &since
	if res := s.Send(t.Context(), "owner@example.com", restored); res.Outcome != notifier.Sent {
		t.Fatalf("restored with lost_since: result = %+v", res)
	}
	m = parse(t, srv.next(t).data)
	if m.subject != "Sensor xa7v9Dfadr7H is back online after 2 h 14 min" {
		t.Errorf("restored subject = %q", m.subject)
	}
	mustContain(t, "restored text", m.text, "It was lost for 2 h 14 min", "before the loss was at Sun, 22 Nov 2026 07:45:55 UTC")
	mustContain(t, "restored HTML", m.html, "lost for <strong>2 h 14 min</strong>")

	open := stateChanged()
	open.ID, open.Type, open.Data, open.Previous, open.Severity = "open-1", "sensor_open_too_long", intp(0), nil, "critical"
	if res := s.Send(t.Context(), "owner@example.com", open); res.Outcome != notifier.Sent {
		t.Fatalf("open too long: result = %+v", res)
	}
	m = parse(t, srv.next(t).data)
	if m.subject != "Critical: Sensor xa7v9Dfadr7H has been unlocked too long" {
		t.Errorf("open too long subject = %q", m.subject)
	}
	mustContain(t, "open too long text", m.text, "unlocked for longer than its alert allows", "Severity: critical")
	mustContain(t, "open too long HTML", m.html, "unlocked for too long", "<strong>critical</strong>")
}

func TestSendClassifiesSMTPReplies(t *testing.T) {
	t.Parallel()
	reply := func(code int, enhanced smtp.EnhancedCode) error {
		return &smtp.SMTPError{Code: code, EnhancedCode: enhanced, Message: "test reply"}
	}
	for _, tc := range []struct {
		name      string
		opts      smtpOptions
		want      notifier.Outcome
		errorType string
	}{
		{"451 at RCPT", smtpOptions{rcptErr: reply(451, smtp.EnhancedCode{4, 3, 0})}, notifier.Retry, email.ErrorTypeSMTPTransient},
		{"550 at RCPT", smtpOptions{rcptErr: reply(550, smtp.EnhancedCode{5, 1, 1})}, notifier.Failed, email.ErrorTypeSMTPPermanent},
		{"421 at MAIL", smtpOptions{mailErr: reply(421, smtp.EnhancedCode{4, 3, 2})}, notifier.Retry, email.ErrorTypeSMTPTransient},
		{"553 at MAIL", smtpOptions{mailErr: reply(553, smtp.EnhancedCode{5, 1, 8})}, notifier.Failed, email.ErrorTypeSMTPPermanent},
		{"452 at DATA", smtpOptions{dataErr: reply(452, smtp.EnhancedCode{4, 3, 1})}, notifier.Retry, email.ErrorTypeSMTPTransient},
		{"554 at DATA", smtpOptions{dataErr: reply(554, smtp.EnhancedCode{5, 6, 0})}, notifier.Failed, email.ErrorTypeSMTPPermanent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := startSMTP(t, tc.opts)
			s := newSender(t, email.Config{SMTPURL: srv.url("smtp")})
			res := s.Send(t.Context(), "owner@example.com", stateChanged())
			if res.Outcome != tc.want || res.ErrorType != tc.errorType || res.Err == nil {
				t.Fatalf("result = %+v, want %s %s", res, tc.want, tc.errorType)
			}
			if !strings.Contains(res.Err.Error(), "test reply") {
				t.Errorf("Err = %v, want the server's reply", res.Err)
			}
			select {
			case d := <-srv.got:
				t.Errorf("the server accepted a message despite answering an error: %q", d.data)
			default:
			}
		})
	}
}

// rawServer accepts connections and hands each to handle.
func rawServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				handle(conn)
			})
		}
	})
	return l.Addr().String()
}

func TestSendGreetingErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		greeting  string
		want      notifier.Outcome
		errorType string
	}{
		{"421 busy, try later\r\n", notifier.Retry, email.ErrorTypeSMTPTransient},
		{"554 no service for you\r\n", notifier.Failed, email.ErrorTypeSMTPPermanent},
	} {
		addr := rawServer(t, func(c net.Conn) {
			_, _ = io.WriteString(c, tc.greeting)
			_, _ = bufio.NewReader(c).ReadString('\n') // until the client hangs up
		})
		s := newSender(t, email.Config{SMTPURL: "smtp://" + addr})
		if res := s.Send(t.Context(), "owner@example.com", stateChanged()); res.Outcome != tc.want || res.ErrorType != tc.errorType {
			t.Errorf("greeting %q: result = %+v, want %s %s", tc.greeting, res, tc.want, tc.errorType)
		}
	}
}

func TestSendConnectionFailures(t *testing.T) {
	t.Parallel()

	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		s := newSender(t, email.Config{SMTPURL: "smtp://" + addr})
		if res := s.Send(t.Context(), "owner@example.com", stateChanged()); res.Outcome != notifier.Retry || res.ErrorType != email.ErrorTypeConnection {
			t.Errorf("result = %+v, want Retry CONNECTION", res)
		}
	})

	// A server that greets, reads the client's EHLO and then says nothing: the
	// client is past connecting and waits on the conversation.
	silent := func(t *testing.T) (addr string, entered <-chan struct{}) {
		in := make(chan struct{}, 4)
		done := make(chan struct{})
		addr = rawServer(t, func(c net.Conn) {
			if _, err := io.WriteString(c, "220 localhost ESMTP\r\n"); err != nil {
				return
			}
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				return
			}
			in <- struct{}{}
			<-done
		})
		t.Cleanup(func() { close(done) }) // runs before rawServer's cleanup
		return addr, in
	}

	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		addr, _ := silent(t)
		s := newSender(t, email.Config{SMTPURL: "smtp://" + addr, Timeout: 300 * time.Millisecond})
		if res := s.Send(t.Context(), "owner@example.com", stateChanged()); res.Outcome != notifier.Retry || res.ErrorType != email.ErrorTypeTimeout {
			t.Errorf("result = %+v, want Retry TIMEOUT", res)
		}
	})

	t.Run("ctx cancelled mid-conversation", func(t *testing.T) {
		t.Parallel()
		addr, entered := silent(t)
		// The sender's own timeout is long: only the cancellation can end this.
		s := newSender(t, email.Config{SMTPURL: "smtp://" + addr, Timeout: 10 * time.Minute})
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			<-entered
			cancel()
		}()
		done := make(chan notifier.Result, 1)
		go func() { done <- s.Send(ctx, "owner@example.com", stateChanged()) }()
		select {
		case res := <-done:
			if res.Outcome != notifier.Retry || res.ErrorType != email.ErrorTypeCanceled {
				t.Errorf("result = %+v, want Retry CANCELED", res)
			}
		case <-time.After(waitFor):
			t.Fatal("Send did not return after ctx was cancelled")
		}
	})
}

func TestSendRejectsBadInput(t *testing.T) {
	t.Parallel()
	// Nothing listens here: these must fail before connecting.
	s := newSender(t, email.Config{SMTPURL: "smtp://127.0.0.1:1"})
	unknown := stateChanged()
	unknown.Type = "door_opened"
	badID := stateChanged()
	badID.ID = "a>b@c"
	for _, tc := range []struct {
		to        string
		n         notifier.Notification
		errorType string
	}{
		{"not an address", stateChanged(), email.ErrorTypeInvalidAddress},
		{"", stateChanged(), email.ErrorTypeInvalidAddress},
		{"owner@example.com", unknown, email.ErrorTypeInvalidNotification},
		{"owner@example.com", badID, email.ErrorTypeInvalidNotification},
	} {
		if res := s.Send(t.Context(), tc.to, tc.n); res.Outcome != notifier.Failed || res.ErrorType != tc.errorType || res.Err == nil {
			t.Errorf("to %q, type %q, id %q: result = %+v, want Failed %s", tc.to, tc.n.Type, tc.n.ID, res, tc.errorType)
		}
	}
}

// testTLS returns a server certificate for 127.0.0.1 and a client config trusting it.
func testTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	hs := httptest.NewUnstartedServer(nil)
	hs.StartTLS()
	defer hs.Close()
	pool := x509.NewCertPool()
	pool.AddCert(hs.Certificate())
	return &tls.Config{Certificates: hs.TLS.Certificates}, &tls.Config{RootCAs: pool}
}

func TestSendTLSAndAuth(t *testing.T) {
	t.Parallel()
	serverTLS, clientTLS := testTLS(t)
	users := map[string]string{"alerts": "s3cret"}

	t.Run("smtps", func(t *testing.T) {
		t.Parallel()
		srv := startSMTP(t, smtpOptions{tls: serverTLS, implicit: true, users: users})
		s := newSender(t, email.Config{SMTPURL: "smtps://alerts:s3cret@" + srv.addr, TLSConfig: clientTLS})
		if res := s.Send(t.Context(), "owner@example.com", stateChanged()); res.Outcome != notifier.Sent {
			t.Fatalf("result = %+v, want Sent", res)
		}
		if d := srv.next(t); !d.tls || d.user != "alerts" {
			t.Errorf("delivered over TLS %v as %q, want TLS as alerts", d.tls, d.user)
		}
	})

	t.Run("starttls", func(t *testing.T) {
		t.Parallel()
		srv := startSMTP(t, smtpOptions{tls: serverTLS, users: users})
		s := newSender(t, email.Config{SMTPURL: "smtp://alerts:s3cret@" + srv.addr, TLSConfig: clientTLS})
		if res := s.Send(t.Context(), "owner@example.com", stateChanged()); res.Outcome != notifier.Sent {
			t.Fatalf("result = %+v, want Sent", res)
		}
		if d := srv.next(t); !d.tls || d.user != "alerts" {
			t.Errorf("delivered over TLS %v as %q, want STARTTLS as alerts", d.tls, d.user)
		}
	})

	t.Run("wrong password", func(t *testing.T) {
		t.Parallel()
		srv := startSMTP(t, smtpOptions{tls: serverTLS, implicit: true, users: users})
		s := newSender(t, email.Config{SMTPURL: "smtps://alerts:wrong@" + srv.addr, TLSConfig: clientTLS})
		if res := s.Send(t.Context(), "owner@example.com", stateChanged()); res.Outcome != notifier.Failed || res.ErrorType != email.ErrorTypeSMTPPermanent {
			t.Errorf("result = %+v, want Failed SMTP_PERMANENT (535)", res)
		}
	})

	t.Run("untrusted certificate", func(t *testing.T) {
		t.Parallel()
		srv := startSMTP(t, smtpOptions{tls: serverTLS, implicit: true})
		s := newSender(t, email.Config{SMTPURL: "smtps://" + srv.addr}) // system roots only
		if res := s.Send(t.Context(), "owner@example.com", stateChanged()); res.Outcome != notifier.Retry || res.ErrorType != email.ErrorTypeConnection {
			t.Errorf("result = %+v, want Retry CONNECTION", res)
		}
	})
}

func TestConfig(t *testing.T) {
	t.Parallel()
	cfg := email.Config{}.WithDefaults()
	if cfg.SMTPURL != email.DefaultSMTPURL || cfg.From != email.DefaultFrom || cfg.Timeout != email.DefaultTimeout {
		t.Errorf("defaults = %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	for field, bad := range map[string]email.Config{
		"SMTPURL": {SMTPURL: "http://127.0.0.1:25"},
		"From":    {From: "not an address"},
		"Timeout": {Timeout: -time.Second},
	} {
		_, err := email.New(bad, nil)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", bad, err, field)
		}
	}
	for _, u := range []string{"smtp://", "smtp://host:0", "smtp://host:99999", "smtp://host:x"} {
		if _, err := email.New(email.Config{SMTPURL: u}, nil); err == nil {
			t.Errorf("New with SMTPURL %q succeeded", u)
		}
	}
}

// Every event type has its own subject, text and HTML body, naming what a
// person needs: the site and its sensors for a site event, the final state for
// sensor_stable; a table row per type, and a type without a row fails.
func TestSendEveryEventType(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, smtpOptions{})
	s := newSender(t, email.Config{SMTPURL: srv.url("smtp")})
	at := "Sun, 22 Nov 2026 10:00:00 UTC"
	type want struct {
		subject  string
		severity string
		text     []string
		html     []string
	}
	site := func(n *notifier.Notification) { n.Site, n.Sensors = "Yard <B>", []string{"s1", "s2", "s3"} }
	cases := []struct {
		typ   event.Type
		setup func(*notifier.Notification)
		want  want
	}{
		{event.StateChanged, nil, want{"Sensor s1 is now unlocked", "info",
			[]string{"is now unlocked.", "It was locked before."}, []string{"is now <strong>unlocked</strong>"}}},
		{event.ConnectionLost, nil, want{"Critical: Sensor s1 lost its connection", "critical",
			[]string{"lost its connection at " + at, "last known state: unlocked"}, []string{"<strong>lost its connection</strong>"}}},
		{event.ConnectionRestored, nil, want{"Sensor s1 is back online", "info",
			[]string{"restored at " + at, "It is unlocked."}, []string{"<strong>restored</strong>"}}},
		{event.SensorOpenTooLong, nil, want{"Critical: Sensor s1 has been unlocked too long", "critical",
			[]string{"unlocked for longer than its alert allows: too long since " + at}, []string{"<strong>unlocked for too long</strong>"}}},
		{event.SiteOutage, site, want{"Site Yard <B> is out", "warning",
			[]string{"Site Yard <B> has lost several sensors at once, since " + at + ": s1, s2, s3.", "replaces their separate connection-lost notices"},
			[]string{"Site <strong>Yard &lt;B&gt;</strong> has <strong>lost several sensors</strong>", ": s1, s2, s3."}}},
		{event.SiteRestored, site, want{"Site Yard <B> is back", "info",
			[]string{"Site Yard <B> is back: most of the sensors it lost (s1, s2, s3) report again, since " + at},
			[]string{"Site <strong>Yard &lt;B&gt;</strong> is <strong>back</strong>", "(s1, s2, s3)"}}},
		{event.MaintenanceEnded, site, want{"Maintenance of site Yard <B> ended", "info",
			[]string{"maintenance window of site Yard <B> ended at " + at, "went silent during it: s1, s2, s3."},
			[]string{"of site <strong>Yard &lt;B&gt;</strong> ended", "went silent during it: s1, s2, s3."}}},
		{event.MaintenanceEnded, func(n *notifier.Notification) { n.ID = "maintenance-sensor" }, want{"Maintenance of sensor s1 ended", "info",
			[]string{"maintenance window of sensor s1 (Main St 1 <back door>) ended at " + at, "went silent during it: none."},
			[]string{"of sensor <strong>s1</strong> (Main St 1 &lt;back door&gt;) ended", "went silent during it: none."}}},
		{event.SensorUnstable, nil, want{"Sensor s1 is unstable", "info",
			[]string{"changes too often (since " + at + "; it is unlocked now)", "held until it settles"},
			[]string{"<strong>changes too often</strong>", "it is unlocked now"}}},
		{event.SensorStable, nil, want{"Sensor s1 settled: unlocked", "info",
			[]string{"settled at " + at + ": it is unlocked."}, []string{"<strong>settled</strong>", "it is <strong>unlocked</strong>"}}},
	}
	covered := map[event.Type]bool{}
	for _, tc := range cases {
		covered[tc.typ] = true
	}
	for _, typ := range event.Types() {
		if !covered[typ] {
			t.Errorf("no case renders %s", typ)
		}
	}
	for _, tc := range cases {
		n := notifier.Notification{ID: "n-" + string(tc.typ), EventID: "0123456789abcdef0123456789abcdef",
			Type: tc.typ, SensorID: "s1", SensorAddress: "Main St 1 <back door>", Data: intp(0), Previous: intp(1),
			At: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), Attempt: 1}
		if tc.setup != nil {
			tc.setup(&n)
		}
		// The severity the retrier gives it: event's one definition.
		n.Severity = event.SeverityOf(tc.typ, n.Data)
		if res := s.Send(t.Context(), "owner@example.com", n); res.Outcome != notifier.Sent {
			t.Fatalf("%s: result = %+v, want Sent", n.ID, res)
		}
		m := parse(t, srv.next(t).data)
		if m.subject != tc.want.subject || string(n.Severity) != tc.want.severity {
			t.Errorf("%s: subject %q severity %s, want %q %s", n.ID, m.subject, n.Severity, tc.want.subject, tc.want.severity)
		}
		mustContain(t, n.ID+" text", m.text, append(tc.want.text, "Severity: "+tc.want.severity, "event "+n.EventID)...)
		mustContain(t, n.ID+" HTML", m.html, append(tc.want.html, "Severity: <strong>"+tc.want.severity+"</strong>",
			`datetime="2026-11-22T10:00:00Z"`)...)
		if strings.Contains(m.html, "<B>") || strings.Contains(m.html, "<back door>") {
			t.Errorf("%s: the HTML part carries a site or address unescaped:\n%s", n.ID, m.html)
		}
	}
}

// A type with no template is refused, not sent blank; every known type has
// one (TestSendEveryEventType renders them).
func TestEveryEventTypeHasATemplate(t *testing.T) {
	t.Parallel()
	srv := startSMTP(t, smtpOptions{})
	s := newSender(t, email.Config{SMTPURL: srv.url("smtp")})
	n := stateChanged()
	for _, typ := range event.Types() {
		n.ID, n.Type = "every-"+string(typ), typ
		if res := s.Send(t.Context(), "owner@example.com", n); res.Outcome != notifier.Sent {
			t.Errorf("%s: result = %+v, want Sent", typ, res)
			continue
		}
		srv.next(t)
	}
	n.ID, n.Type = "unknown", "sensor_on_fire"
	if res := s.Send(t.Context(), "owner@example.com", n); res.Outcome != notifier.Failed || res.ErrorType != email.ErrorTypeInvalidNotification {
		t.Errorf("unknown type: result = %+v, want Failed %s", res, email.ErrorTypeInvalidNotification)
	}
}
