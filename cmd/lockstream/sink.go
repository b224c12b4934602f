package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/mail"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
	"golang.org/x/sync/errgroup"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/notifier/swrve/swrvetest"
	"github.com/lockstream/lockstream/notifier/webhook"
)

// runSink serves a webhook receiver that verifies each delivery's signature and prints
// it: the demo's stand-in for a client system. With LOCKSTREAM_SINK_SMTP_ADDR it also
// takes email over SMTP and prints one line per message (the demo's mailbox).
func runSink(ctx context.Context, c *sinkSettings, stdout io.Writer, logger *slog.Logger) error {
	secret := c.Secret
	if secret == "" {
		return errors.New("LOCKSTREAM_SINK_SECRET / --sink-secret is required: the client's webhook secret, to verify signatures")
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("webhook sink: %w", err)
	}
	out := &lockedWriter{w: stdout}
	g, gctx := errgroup.WithContext(ctx)
	if addr := c.SMTPAddr; addr != "" {
		mln, err := net.Listen("tcp", addr)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("mail sink: %w", err)
		}
		logger.Info("mail sink listening", "addr", mln.Addr().String())
		g.Go(func() error { return serveMailSink(gctx, mln, out) })
	}
	srv := &http.Server{Handler: sinkHandler(secret, out), ReadHeaderTimeout: 5 * time.Second}
	logger.Info("webhook sink listening", "addr", ln.Addr().String())
	g.Go(func() error { return serveUntilDone(gctx, srv, ln) })
	return g.Wait()
}

// lockedWriter keeps the lines of the webhook and mail sinks whole.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// serveMailSink accepts every message over SMTP on ln and prints its recipient
// and subject, until ctx ends.
func serveMailSink(ctx context.Context, ln net.Listener, out io.Writer) error {
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) {
		return &mailSinkSession{out: out}, nil
	}))
	srv.Domain = "localhost"
	srv.ReadTimeout, srv.WriteTimeout = time.Minute, time.Minute
	srv.MaxMessageBytes = 1 << 20
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("mail sink: %w", err)
	case <-ctx.Done():
	}
	if err := srv.Close(); err != nil {
		return fmt.Errorf("mail sink: closing: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, smtp.ErrServerClosed) {
		return fmt.Errorf("mail sink: %w", err)
	}
	return nil
}

// mailSinkSession is one SMTP session of the mail sink.
type mailSinkSession struct {
	out io.Writer
	to  []string
}

func (s *mailSinkSession) Mail(string, *smtp.MailOptions) error { return nil }

func (s *mailSinkSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}

func (s *mailSinkSession) Data(r io.Reader) error {
	m, err := mail.ReadMessage(r)
	if err != nil {
		return fmt.Errorf("reading the message: %w", err)
	}
	if _, err := io.Copy(io.Discard, m.Body); err != nil {
		return fmt.Errorf("reading the message: %w", err)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(m.Header.Get("Subject"))
	if err != nil {
		subject = m.Header.Get("Subject") // printed as it came
	}
	fmt.Fprintf(s.out, "email   to %s  %q\n", strings.Join(s.to, ", "), subject)
	return nil
}

func (s *mailSinkSession) Reset() { s.to = nil }

func (s *mailSinkSession) Logout() error { return nil }

// sinkHandler answers 204 to a correctly signed webhook and 401 to anything else,
// printing one line per request.
func sinkHandler(secret string, out io.Writer) http.Handler {
	var mu sync.Mutex // keeps a webhook's checks and line together when deliveries arrive concurrently
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "reading body", http.StatusBadRequest)
			return
		}
		verifyErr := webhook.Verify(secret, r.Header, body, 0)
		var msg webhook.Body
		_ = json.Unmarshal(body, &msg) // printed as far as it decodes; the signature is what matters
		mu.Lock()
		defer mu.Unlock()
		if verifyErr != nil {
			fmt.Fprintf(out, "webhook REJECTED %s: %v\n", r.Header.Get(webhook.HeaderID), verifyErr)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(out, "webhook ok  %-19s sensor %-16s %s  attempt %d  signature verified\n",
			msg.Type, msg.Sensor.ID, describeState(msg.Type, msg.Data), msg.Attempt)
		w.WriteHeader(http.StatusNoContent)
	})
}

func describeState(eventType event.Type, data *int) string {
	switch {
	case eventType == event.ConnectionLost:
		return "went silent"
	case eventType == event.ConnectionRestored:
		return "is back"
	case data == nil:
		return "state unknown"
	case *data == 1:
		return "locked"
	default:
		return "unlocked"
	}
}

// serveUntilDone serves on ln until ctx ends, then shuts down, letting requests in
// progress finish for up to 5 s.
func serveUntilDone(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// runFakeSwrve serves the fake Swrve of notifier/swrve/swrvetest, for the demo and
// for trying lockstream's push path without Swrve.
func runFakeSwrve(ctx context.Context, c *fakeSwrveSettings, _ io.Writer, logger *slog.Logger) error {
	scale := c.Scale
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("fake-swrve: %w", err)
	}
	logger.Info("fake Swrve listening", "addr", ln.Addr().String(), "latency_scale", scale)
	srv := &http.Server{Handler: swrvetest.NewServer(swrvetest.Config{Scale: scale}), ReadHeaderTimeout: 5 * time.Second}
	return serveUntilDone(ctx, srv, ln)
}
