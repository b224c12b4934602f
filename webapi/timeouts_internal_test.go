package webapi

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

func newTimeoutServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.AdminToken = "admin"
	reg := prometheus.NewRegistry()
	s, err := New(cfg, registry.New(&storage.Postgres{}), nil, reg, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Every timeout of the HTTP server is set, by default too.
func TestServerHasEveryTimeout(t *testing.T) {
	t.Parallel()
	srv := newTimeoutServer(t, Config{}).httpServer(context.Background(), http.NotFoundHandler())
	if srv.ReadHeaderTimeout != DefaultReadHeaderTimeout || srv.ReadTimeout != DefaultReadTimeout ||
		srv.WriteTimeout != DefaultWriteTimeout || srv.IdleTimeout != DefaultIdleTimeout {
		t.Fatalf("timeouts: read header %v, read %v, write %v, idle %v", srv.ReadHeaderTimeout, srv.ReadTimeout,
			srv.WriteTimeout, srv.IdleTimeout)
	}
	if got := newTimeoutServer(t, Config{}).cfg.RequestTimeout; got != DefaultWriteTimeout*2/3 {
		t.Fatalf("default RequestTimeout = %v", got)
	}
	cfg := Config{AdminToken: "admin", WriteTimeout: time.Second, RequestTimeout: time.Second}.WithDefaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "RequestTimeout") {
		t.Fatalf("RequestTimeout as long as WriteTimeout: %v", err)
	}
}

// WriteTimeout cuts an answer that goes on for longer; a streaming route lifts it
// and keeps writing, its context alive past ReadTimeout too.
func TestStreamingRouteOutlivesWriteTimeout(t *testing.T) {
	t.Parallel()
	const writeTimeout = 200 * time.Millisecond
	s := newTimeoutServer(t, Config{ReadTimeout: writeTimeout, WriteTimeout: writeTimeout, RequestTimeout: writeTimeout / 2})
	// Both handlers write a line every 20 ms; the plain one until a write fails
	// (the deadline cut the connection), the streaming one for five write timeouts.
	cut := make(chan bool, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		stop := time.Now().Add(30 * time.Second)
		for time.Now().Before(stop) {
			_, err := io.WriteString(w, "tick\n")
			if err == nil {
				err = rc.Flush()
			}
			if err != nil {
				cut <- true
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		cut <- false
	})
	mux.Handle("/stream", s.streaming(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		// Not a speed check: the stream must outlive the server's write timeout,
		// so it keeps writing until that timeout has passed several times over; a
		// slow machine only makes it live longer, which it must survive anyway.
		outlived := time.After(5 * writeTimeout)
		for tick := time.NewTicker(20 * time.Millisecond); ; <-tick.C {
			if _, err := io.WriteString(w, "tick\n"); err != nil {
				t.Errorf("streaming write failed: %v", err)
				return
			}
			if err := rc.Flush(); err != nil {
				t.Errorf("streaming flush failed: %v", err)
				return
			}
			select {
			case <-outlived:
			default:
				continue
			}
			tick.Stop()
			break
		}
		// ReadTimeout has passed too; the request must still be alive.
		if err := r.Context().Err(); err != nil {
			t.Errorf("the streaming request's context ended: %v", err)
		}
		_, _ = io.WriteString(w, "done\n")
	})))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := s.httpServer(context.Background(), mux)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String()

	resp, err := http.Get(base + "/plain")
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	if !<-cut {
		t.Fatal("a plain route wrote for 30 s: WriteTimeout did not cut it")
	}

	resp, err = http.Get(base + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	if !strings.HasSuffix(string(body), "done\n") {
		t.Fatalf("the stream was cut: %q", body)
	}
}
