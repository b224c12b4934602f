package bridgetest

import (
	"io"
	"net"
	"net/mail"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

// Mail is one message the test SMTP server accepted.
type Mail struct {
	To      string
	Subject string
	Body    string
	At      time.Time // when the server accepted it
}

// SMTP is an in-process SMTP server (go-smtp) on a loopback port, closed when the
// test ends: tests may use it, as they may not use a mock of a real service.
type SMTP struct {
	URL string
	// Got receives every accepted message.
	Got chan Mail
}

// StartSMTP starts the server.
func StartSMTP(t testing.TB) *SMTP {
	t.Helper()
	s := &SMTP{Got: make(chan Mail, 100)}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &smtpSession{s: s}, nil }))
	srv.Domain = "localhost"
	srv.ReadTimeout, srv.WriteTimeout = time.Minute, time.Minute
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.URL = "smtp://" + l.Addr().String()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-served
	})
	return s
}

type smtpSession struct {
	s  *SMTP
	to string
}

func (x *smtpSession) Mail(string, *smtp.MailOptions) error { return nil }
func (x *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	x.to = to
	return nil
}
func (x *smtpSession) Data(r io.Reader) error {
	m, err := mail.ReadMessage(r)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(m.Body)
	if err != nil {
		return err
	}
	x.s.Got <- Mail{To: x.to, Subject: m.Header.Get("Subject"), Body: string(body), At: time.Now()}
	return nil
}
func (x *smtpSession) Reset()        {}
func (x *smtpSession) Logout() error { return nil }
