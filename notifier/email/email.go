// Package email delivers notifications by SMTP (through github.com/wneessen/go-mail):
// one multipart/alternative message per notification, with a plain-text and an
// HTML body rendered from templates per event type, and a Message-ID derived from
// the notification id, so a re-sent notification keeps its Message-ID and mail
// clients can spot the duplicate.
//
// A Sender makes one attempt per Send and classifies it: SMTP 4xx replies,
// refused connections and timeouts are Retry; 5xx replies are Failed.
package email

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"embed"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"log/slog"
	"net"
	netmail "net/mail"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	texttemplate "text/template"
	"time"

	"github.com/wneessen/go-mail"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/notifier"
)

// Config defaults.
const (
	DefaultSMTPURL = "smtp://127.0.0.1:25"
	DefaultFrom    = "lockstream@localhost"
	DefaultTimeout = 15 * time.Second
)

// The ErrorType values of the results Send returns.
const (
	ErrorTypeInvalidAddress      = "INVALID_ADDRESS"      // Failed: the recipient is not an email address
	ErrorTypeInvalidNotification = "INVALID_NOTIFICATION" // Failed: no template for the type, or an id unfit for a Message-ID
	ErrorTypeSMTPTransient       = "SMTP_TRANSIENT"       // Retry: the server answered 4xx
	ErrorTypeSMTPPermanent       = "SMTP_PERMANENT"       // Failed: the server answered 5xx
	ErrorTypeTimeout             = "TIMEOUT"              // Retry: the attempt ran past Timeout or ctx's deadline
	ErrorTypeCanceled            = "CANCELED"             // Retry: the caller cancelled ctx (shutdown)
	ErrorTypeConnection          = "CONNECTION"           // Retry: refused, reset, TLS failure
)

// Config configures a Sender.
type Config struct {
	// SMTPURL is the server to hand mail to: smtp://[user:password@]host[:port]
	// (port 25 by default; STARTTLS when the server offers it) or
	// smtps://[user:password@]host[:port] (TLS from the start, port 465 by
	// default). With a user, the Sender authenticates with AUTH PLAIN, which it
	// only does over TLS or to localhost. Defaults to DefaultSMTPURL.
	SMTPURL string
	// From is the sender address, optionally with a display name
	// ("lockstream <alerts@example.com>"). Defaults to DefaultFrom.
	From string
	// Timeout bounds one attempt, from connecting to the server's last reply.
	// Defaults to DefaultTimeout (15s).
	Timeout time.Duration
	// TLSConfig is used for STARTTLS and smtps. Defaults to the system's roots,
	// verifying the server as the URL's host.
	TLSConfig *tls.Config
}

// WithDefaults returns the config with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.SMTPURL = cmp.Or(c.SMTPURL, DefaultSMTPURL)
	c.From = cmp.Or(c.From, DefaultFrom)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if _, err := parseSMTPURL(c.SMTPURL); err != nil {
		return fmt.Errorf("email config: SMTPURL: %w", err)
	}
	if _, err := netmail.ParseAddress(c.From); err != nil {
		return fmt.Errorf("email config: From %q: %w", c.From, err)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("email config: Timeout must be positive, got %s", c.Timeout)
	}
	return nil
}

// server is a parsed SMTPURL.
type server struct {
	host        string
	port        int
	implicitTLS bool
	user, pass  string
	hasUser     bool
}

func parseSMTPURL(raw string) (server, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return server{}, err
	}
	var s server
	switch u.Scheme {
	case "smtp":
		s.port = 25
	case "smtps":
		s.port, s.implicitTLS = 465, true
	default:
		return server{}, fmt.Errorf("scheme %q: want smtp or smtps", u.Scheme)
	}
	if s.host = u.Hostname(); s.host == "" {
		return server{}, errors.New("no host")
	}
	if p := u.Port(); p != "" {
		if s.port, err = strconv.Atoi(p); err != nil || s.port < 1 || s.port > 65535 {
			return server{}, fmt.Errorf("port %q: want 1 to 65535", p)
		}
	}
	if u.User != nil {
		s.user, s.hasUser = u.User.Username(), true
		s.pass, _ = u.User.Password()
	}
	return s, nil
}

//go:embed templates/*.tmpl
var templateFS embed.FS

// Sender mails notifications. It is safe for concurrent use.
type Sender struct {
	cfg    Config
	logger *slog.Logger
	server server
	tls    *tls.Config
	dialer net.Dialer
	client *mail.Client
	text   *texttemplate.Template
	html   *htmltemplate.Template
}

// New returns a Sender. It does not connect: the server is only reached by Send.
// logger may be nil.
func New(cfg Config, logger *slog.Logger) (*Sender, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Sender{cfg: cfg, logger: logger, dialer: net.Dialer{Timeout: cfg.Timeout}}
	s.server, _ = parseSMTPURL(cfg.SMTPURL) // validated above

	s.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLSConfig != nil {
		s.tls = cfg.TLSConfig.Clone()
	}
	if s.tls.ServerName == "" {
		s.tls.ServerName = s.server.host
	}

	var err error
	if s.text, err = texttemplate.ParseFS(templateFS, "templates/text.tmpl", "templates/unseen_text.tmpl"); err != nil {
		return nil, fmt.Errorf("parsing email text templates: %w", err)
	}
	if s.html, err = htmltemplate.ParseFS(templateFS, "templates/html.tmpl", "templates/unseen_html.tmpl"); err != nil {
		return nil, fmt.Errorf("parsing email HTML templates: %w", err)
	}

	opts := []mail.Option{
		mail.WithPort(s.server.port),
		mail.WithTimeout(cfg.Timeout),
		mail.WithTLSConfig(s.tls),
		// Dialling ourselves lets Send close the connection when ctx ends, which
		// go-mail alone only honours while connecting.
		mail.WithDialContextFunc(s.dial),
	}
	if s.server.implicitTLS {
		opts = append(opts, mail.WithTLSPolicy(mail.NoTLS)) // s.dial does the TLS
	} else {
		opts = append(opts, mail.WithTLSPolicy(mail.TLSOpportunistic))
	}
	if s.server.hasUser {
		opts = append(opts, mail.WithSMTPAuth(mail.SMTPAuthPlain),
			mail.WithUsername(s.server.user), mail.WithPassword(s.server.pass))
	}
	if s.client, err = mail.NewClient(s.server.host, opts...); err != nil {
		return nil, fmt.Errorf("creating SMTP client: %w", err)
	}
	return s, nil
}

// Send makes one delivery attempt of n to the address to and classifies it.
func (s *Sender) Send(ctx context.Context, to string, n notifier.Notification) notifier.Result {
	msg, err := s.message(to, n)
	return s.send(ctx, msg, err)
}

// send attempts msg, or, when building it failed with err, classifies that
// failure: an address that cannot be used, or a notification that cannot be
// rendered.
func (s *Sender) send(ctx context.Context, msg *mail.Msg, err error) notifier.Result {
	if err != nil {
		var addrErr *addressError
		if errors.As(err, &addrErr) {
			return failed(ErrorTypeInvalidAddress, err)
		}
		return failed(ErrorTypeInvalidNotification, err)
	}
	return s.attempt(ctx, msg)
}

// attempt hands msg to the server once, within Timeout, and classifies the
// outcome.
func (s *Sender) attempt(ctx context.Context, msg *mail.Msg) notifier.Result {
	attemptCtx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	conn := &attemptConn{}
	// Closing the connection is the only way to interrupt an SMTP conversation
	// that is waiting on the server.
	stop := context.AfterFunc(attemptCtx, conn.close)
	defer stop()
	// go-mail leaves the connection open on some failed handshakes: close it
	// whatever happened (a no-op after a clean QUIT).
	defer conn.close()

	start := time.Now()
	err := s.deliver(context.WithValue(attemptCtx, attemptConnKey{}, conn), msg)
	res := s.classify(ctx, attemptCtx, err)
	res.Duration = time.Since(start)
	return res
}

// deliver runs one SMTP conversation.
func (s *Sender) deliver(ctx context.Context, msg *mail.Msg) error {
	client, err := s.client.DialToSMTPClientWithContext(ctx)
	if err != nil {
		return fmt.Errorf("connecting to SMTP server %s: %w", s.addr(), err)
	}
	if err := s.client.SendWithSMTPClient(client, msg); err != nil {
		return fmt.Errorf("sending mail through %s: %w", s.addr(), err)
	}
	// The message is accepted once DATA is; a failing QUIT does not undo that.
	if err := s.client.CloseWithSMTPClient(client); err != nil {
		s.logger.Debug("closing SMTP connection after the message was accepted", "server", s.addr(), "error", err)
	}
	return nil
}

// classify turns deliver's error into a result.
func (s *Sender) classify(ctx, attemptCtx context.Context, err error) notifier.Result {
	if err == nil {
		return notifier.Result{Outcome: notifier.Sent}
	}
	res := notifier.Result{Outcome: notifier.Retry, Err: err}
	var sendErr *mail.SendError
	var protoErr *textproto.Error
	code := 0
	switch {
	case errors.As(err, &sendErr) && sendErr.ErrorCode() != 0:
		code = sendErr.ErrorCode()
	case errors.As(err, &protoErr):
		code = protoErr.Code
	}
	var netErr net.Error
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		res.ErrorType = ErrorTypeCanceled
	case code >= 400 && code < 500:
		res.ErrorType = ErrorTypeSMTPTransient
	case code >= 500:
		res.Outcome = notifier.Failed
		res.ErrorType = ErrorTypeSMTPPermanent
	case attemptCtx.Err() != nil, errors.As(err, &netErr) && netErr.Timeout():
		res.ErrorType = ErrorTypeTimeout
	default:
		res.ErrorType = ErrorTypeConnection
	}
	return res
}

func (s *Sender) addr() string {
	return net.JoinHostPort(s.server.host, strconv.Itoa(s.server.port))
}

// errAttemptOver is returned by a dial that completes after its attempt ended.
var errAttemptOver = errors.New("the attempt ended while connecting")

// attemptConnKey carries an attempt's *attemptConn from Send to dial through
// go-mail, which passes Send's context to its dial function.
type attemptConnKey struct{}

// attemptConn is the connection of one attempt, closed when the attempt ends.
type attemptConn struct {
	mu     sync.Mutex
	conn   net.Conn
	closed bool
}

// set records conn; false if the attempt already ended (conn must not be used).
func (a *attemptConn) set(conn net.Conn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.conn = conn
	return true
}

func (a *attemptConn) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.conn != nil {
		// An error here means it was closed already, by QUIT or by go-mail.
		_ = a.conn.Close()
	}
}

// dial connects to the server (with TLS for smtps) and registers the connection
// with the attempt it belongs to.
func (s *Sender) dial(ctx context.Context, network, address string) (net.Conn, error) {
	var conn net.Conn
	var err error
	if s.server.implicitTLS {
		conn, err = (&tls.Dialer{NetDialer: &s.dialer, Config: s.tls}).DialContext(ctx, network, address)
	} else {
		conn, err = s.dialer.DialContext(ctx, network, address)
	}
	if err != nil {
		return nil, err
	}
	if a, ok := ctx.Value(attemptConnKey{}).(*attemptConn); ok && !a.set(conn) {
		_ = conn.Close() // the attempt is over; nothing else will use it
		return nil, fmt.Errorf("dialing %s: %w", address, errAttemptOver)
	}
	return conn, nil
}

// addressError marks a recipient that is not an email address.
type addressError struct{ err error }

func (e *addressError) Error() string { return e.err.Error() }
func (e *addressError) Unwrap() error { return e.err }

// view is what the templates see.
type view struct {
	NotificationID string
	EventID        string
	SensorID       string
	Address        string
	// State is the new (state_changed) or last known state in words.
	State string
	// PreviousState is the state before a state_changed in words; empty for a
	// sensor's first reading.
	PreviousState string
	At            string
	AtRFC3339     string
	// Severity is critical, warning or info.
	Severity string
	// Site and Sensors are a site event's site and the sensors it lists.
	Site    string
	Sensors string
	// Outage ("2 h 14 min") and LostSince say how long a restored sensor was
	// lost; empty for other events.
	Outage    string
	LostSince string
}

// stateWord names a sensor state: 1 is locked, 0 unlocked.
func stateWord(v *int) string {
	switch {
	case v == nil:
		return "unknown"
	case *v == 1:
		return "locked"
	case *v == 0:
		return "unlocked"
	}
	return fmt.Sprintf("in state %d", *v)
}

// message renders n into a mail to the address to.
func (s *Sender) message(to string, n notifier.Notification) (*mail.Msg, error) {
	if !validMessageIDPart(n.ID) {
		return nil, fmt.Errorf("notification id %q cannot form a Message-ID", n.ID)
	}
	name := string(n.Type)
	if s.text.Lookup(name+".subject") == nil || s.html.Lookup(name+".html") == nil {
		return nil, fmt.Errorf("no email template for event type %q", n.Type)
	}
	v := view{
		NotificationID: n.ID,
		EventID:        n.EventID,
		SensorID:       n.SensorID,
		Address:        cmp.Or(strings.TrimSpace(n.SensorAddress), "no address on record"),
		State:          stateWord(n.Data),
		At:             n.At.UTC().Format("Mon, 02 Jan 2006 15:04:05 MST"),
		AtRFC3339:      n.At.UTC().Format(time.RFC3339),
		Severity:       string(cmp.Or(n.Severity, event.Info)),
		Site:           n.Site,
		Sensors:        strings.Join(n.Sensors, ", "),
	}
	if n.LostSince != nil {
		v.Outage = event.Outage(event.SilentSeconds(n.LostSince, n.At))
		v.LostSince = n.LostSince.UTC().Format("Mon, 02 Jan 2006 15:04:05 MST")
	}
	if n.Previous != nil {
		v.PreviousState = stateWord(n.Previous)
	}

	prefix := ""
	if v.Severity == "critical" {
		prefix = "Critical: "
	}
	return s.render(to, n.ID, name, prefix, v)
}

// render renders the templates name.subject, name.text and name.html with v into
// a mail to the address to, its subject led by prefix, its Message-ID made of id.
func (s *Sender) render(to, id, name, prefix string, v any) (*mail.Msg, error) {
	var subject, text, html bytes.Buffer
	subject.WriteString(prefix)
	if err := s.text.ExecuteTemplate(&subject, name+".subject", v); err != nil {
		return nil, fmt.Errorf("rendering email subject: %w", err)
	}
	if err := s.text.ExecuteTemplate(&text, name+".text", v); err != nil {
		return nil, fmt.Errorf("rendering email text: %w", err)
	}
	if err := s.html.ExecuteTemplate(&html, name+".html", v); err != nil {
		return nil, fmt.Errorf("rendering email HTML: %w", err)
	}

	m := mail.NewMsg()
	if err := m.From(s.cfg.From); err != nil {
		return nil, fmt.Errorf("setting From %q: %w", s.cfg.From, err)
	}
	if err := m.To(to); err != nil {
		return nil, &addressError{fmt.Errorf("recipient %q: %w", to, err)}
	}
	// One line, whatever the data held: a header cannot be split by a newline.
	m.Subject(strings.Join(strings.Fields(subject.String()), " "))
	m.SetMessageIDWithValue(id + "@lockstream")
	m.SetDate()
	// RFC 3834: tells auto-responders (vacation replies) not to answer.
	m.SetGenHeader("Auto-Submitted", "auto-generated")
	m.SetBodyString(mail.TypeTextPlain, text.String())
	m.AddAlternativeString(mail.TypeTextHTML, html.String())
	return m, nil
}

// validMessageIDPart reports whether id can stand left of the @ in a
// Message-ID: a non-empty dot-atom of letters, digits, '-' and '_'.
func validMessageIDPart(id string) bool {
	if id == "" || strings.HasPrefix(id, ".") || strings.HasSuffix(id, ".") || strings.Contains(id, "..") {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func failed(errorType string, err error) notifier.Result {
	return notifier.Result{Outcome: notifier.Failed, ErrorType: errorType, Err: err}
}
