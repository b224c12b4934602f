package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/emersion/go-smtp"

	"github.com/lockstream/lockstream/notifier/swrve/swrvetest"
	"github.com/lockstream/lockstream/notifier/webhook"
)

// soakSinks are the receivers of the soak's deliveries: the clients' webhook
// endpoints, a mailbox and the fake Swrve. Each records everything it got.
type soakSinks struct {
	hooks    *soakHookSink
	mail     *soakMailSink
	swrve    *swrvetest.Server
	swrveURL string

	mu       sync.Mutex
	byDevice map[string]int // Swrve requests by device, any answer
}

func startSoakSinks(t *testing.T, swrveRate int) *soakSinks {
	t.Helper()
	s := &soakSinks{hooks: startSoakHookSink(t), mail: startSoakMailSink(t), byDevice: map[string]int{}}
	s.swrve = swrvetest.NewServer(swrvetest.Config{Scale: 0.01, MaxPerSecond: swrveRate, Seed: 24,
		Observe: func(r swrvetest.Request) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.byDevice[r.User]++
		}})
	srv := httptest.NewServer(s.swrve)
	t.Cleanup(srv.Close)
	s.swrveURL = srv.URL
	return s
}

// devices returns how many Swrve requests each device got.
func (s *soakSinks) devices() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.byDevice))
	for k, v := range s.byDevice {
		out[k] = v
	}
	return out
}

// hookReceipt is one webhook request as received.
type hookReceipt struct {
	id, typ, sensor string
	attempt         int
}

// soakHookSink serves every client's webhook URL (/hook/<client name>),
// verifies each request's signature with that client's secret, answers 204 and
// records the requests in the order they came.
type soakHookSink struct {
	server *httptest.Server

	mu      sync.Mutex
	secrets map[string]string
	got     map[string][]hookReceipt
	bad     []string
}

func startSoakHookSink(t *testing.T) *soakHookSink {
	t.Helper()
	s := &soakHookSink{secrets: map[string]string{}, got: map[string][]hookReceipt{}}
	s.server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.server.Close)
	return s
}

func (s *soakHookSink) url(client string) string { return s.server.URL + "/hook/" + client }

func (s *soakHookSink) setSecret(client, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets[client] = secret
}

func (s *soakHookSink) serve(w http.ResponseWriter, r *http.Request) {
	client := strings.TrimPrefix(r.URL.Path, "/hook/")
	raw, err := io.ReadAll(r.Body)
	var b struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Attempt int    `json:"attempt"`
		Sensor  struct {
			ID string `json:"id"`
		} `json:"sensor"`
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		err = webhook.Verify(s.secrets[client], r.Header, raw, 0)
	}
	if err == nil {
		err = json.Unmarshal(raw, &b)
	}
	if err != nil {
		s.bad = append(s.bad, client+": "+err.Error())
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	s.got[client] = append(s.got[client], hookReceipt{id: r.Header.Get(webhook.HeaderID), typ: b.Type, sensor: b.Sensor.ID, attempt: b.Attempt})
	w.WriteHeader(http.StatusNoContent)
}

// received returns the client's requests in arrival order, and the requests
// that failed verification.
func (s *soakHookSink) received(client string) ([]hookReceipt, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hookReceipt(nil), s.got[client]...), append([]string(nil), s.bad...)
}

// soakMailSink takes every email over SMTP and counts them by recipient.
type soakMailSink struct {
	addr string
	mu   sync.Mutex
	to   map[string]int
}

func startSoakMailSink(t *testing.T) *soakMailSink {
	t.Helper()
	m := &soakMailSink{to: map[string]int{}}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &soakMailSession{sink: m}, nil }))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return m
}

func (m *soakMailSink) count(addr string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.to[addr]
}

type soakMailSession struct {
	sink *soakMailSink
	rcpt []string
}

func (s *soakMailSession) Mail(string, *smtp.MailOptions) error { return nil }
func (s *soakMailSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.rcpt = append(s.rcpt, to)
	return nil
}
func (s *soakMailSession) Reset()        { s.rcpt = nil }
func (s *soakMailSession) Logout() error { return nil }

// Data counts the message once per recipient, once it was read whole (what
// the sender's end of DATA waits for).
func (s *soakMailSession) Data(r io.Reader) error {
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	s.sink.mu.Lock()
	defer s.sink.mu.Unlock()
	for _, to := range s.rcpt {
		s.sink.to[to]++
	}
	return nil
}
