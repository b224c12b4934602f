package main

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// tcpProxy forwards loopback connections to a shared service (Postgres, Redis,
// RabbitMQ, Mosquitto) for the soak's processes only. Its cut is the soak's
// "restart" of the service: every open connection is closed at once and new
// ones are refused (accepted and closed) for a while, which is what a client
// sees of a restarting server — without stopping the service that other tests
// and engineers use at the same time.
type tcpProxy struct {
	name   string
	target string
	ln     net.Listener

	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	downUntil time.Time
	cuts      int
}

// startProxy listens on a free loopback port and forwards to target
// (host:port) until the test ends.
func startProxy(t *testing.T, name, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy for %s: %v", name, err)
	}
	p := &tcpProxy{name: name, target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.closeAll()
	})
	return p
}

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed at the test's end
		}
		go p.forward(c)
	}
}

func (p *tcpProxy) forward(c net.Conn) {
	p.mu.Lock()
	down := time.Now().Before(p.downUntil)
	p.mu.Unlock()
	if down {
		_ = c.Close()
		return
	}
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, s) {
		return
	}
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		// Either side ending ends both, as a dead server does.
		_ = dst.Close()
		_ = src.Close()
	}
	wg.Add(2)
	go pipe(s, c)
	go pipe(c, s)
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// track records a forwarded pair, unless a cut began meanwhile.
func (p *tcpProxy) track(c, s net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.downUntil) {
		_ = c.Close()
		_ = s.Close()
		return false
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	return true
}

// cut closes every connection through the proxy and refuses new ones for
// down.
func (p *tcpProxy) cut(down time.Duration) {
	p.mu.Lock()
	p.downUntil = time.Now().Add(down)
	p.cuts++
	p.mu.Unlock()
	p.closeAll()
}

func (p *tcpProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// addr is where the proxy listens.
func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

// proxiedURL returns raw (a service URL) with its host and port replaced by a
// new proxy's, and the proxy.
func proxiedURL(t *testing.T, name, raw string) (string, *tcpProxy) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		t.Fatalf("%s URL %q: %v", name, raw, errors.Join(err, errors.New("no host")))
	}
	p := startProxy(t, name, u.Host)
	u.Host = p.addr()
	return u.String(), p
}
