package webhook

import (
	"errors"
	"net"
	"net/netip"
	"net/url"
	"testing"
)

func TestAddressGuardCheck(t *testing.T) {
	t.Parallel()
	g := newAddressGuard(&net.Dialer{})
	for _, a := range []string{
		"127.0.0.1", "127.255.0.9", "::1", "::ffff:127.0.0.1",
		"10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.0.1", "fc00::1", "fd12:3456::1",
		"169.254.169.254", "169.254.0.1", "fe80::1",
		"0.0.0.0", "::", "0.1.2.3",
		"224.0.0.1", "239.255.255.250", "ff02::1", "ff05::2",
		"100.64.0.1", "100.127.255.255",
		"255.255.255.255", "240.0.0.1", "198.18.0.1", "192.0.0.170", "192.0.2.1",
		"64:ff9b::7f00:1", "2001:db8::1", "fec0::1",
	} {
		if err := g.check(netip.MustParseAddr(a)); !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("check(%s) = %v, want ErrForbiddenAddress", a, err)
		}
	}
	for _, a := range []string{
		"8.8.8.8", "1.1.1.1", "93.184.216.34", "172.32.0.1", "100.128.0.1", "169.255.0.1",
		"2606:4700:4700::1111", "2a00:1450:4001:81c::200e", "::ffff:8.8.8.8",
	} {
		if err := g.check(netip.MustParseAddr(a)); err != nil {
			t.Errorf("check(%s) = %v, want nil (public)", a, err)
		}
	}
	// The dial-time Control check refuses what it cannot parse.
	if err := g.control("tcp", "not-an-address", nil); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("control(garbage) = %v, want ErrForbiddenAddress", err)
	}
	if err := g.control("tcp", "[::1]:80", nil); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("control([::1]:80) = %v, want ErrForbiddenAddress", err)
	}
}

func TestAddressGuardDialRefusesBeforeConnecting(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	_, port, _ := net.SplitHostPort(l.Addr().String())

	// The resolve-and-check path alone, without the Control backstop.
	dialer := &net.Dialer{}
	g := newAddressGuard(dialer)
	dialer.Control = nil
	for _, host := range []string{"127.0.0.1", "localhost"} {
		conn, err := g.dialContext(t.Context(), "tcp", net.JoinHostPort(host, port))
		if !errors.Is(err, ErrForbiddenAddress) {
			if conn != nil {
				_ = conn.Close()
			}
			t.Errorf("dialContext(%s) = %v, want ErrForbiddenAddress", host, err)
		}
	}
	// The Control backstop alone, as when a dial bypasses dialContext.
	newAddressGuard(dialer)
	if conn, err := dialer.DialContext(t.Context(), "tcp", l.Addr().String()); !errors.Is(err, ErrForbiddenAddress) {
		if conn != nil {
			_ = conn.Close()
		}
		t.Errorf("Control: dial = %v, want ErrForbiddenAddress", err)
	}
}

func TestEndpointKey(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://Example.com/a":         "http://example.com:80",
		"https://example.com/b?x=1":    "https://example.com:443",
		"https://example.com:8443/c":   "https://example.com:8443",
		"http://[2001:db8::1]:8080/":   "http://[2001:db8::1]:8080",
		"http://user:pw@example.com/d": "http://example.com:80",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := endpointKey(u); got != want {
			t.Errorf("endpointKey(%s) = %s, want %s", in, got, want)
		}
	}
}
