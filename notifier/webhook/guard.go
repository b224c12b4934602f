package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// ErrForbiddenAddress is returned (wrapped) when a webhook URL leads to an address
// lockstream refuses to call: loopback, private, link-local (cloud metadata
// included), CGNAT, multicast, unspecified or otherwise reserved.
var ErrForbiddenAddress = errors.New("webhook address is not public")

// addressGuard refuses non-public addresses at dial time, after DNS resolution,
// so neither a hostname that resolves to 127.0.0.1 nor one re-resolving to a
// private address later (DNS rebinding) gets through: it resolves the host
// itself, refuses if any address is not public, and dials exactly the addresses
// it checked. The dialer's Control checks the address once more just before
// connect, in case some path reaches the dialer without going through here.
type addressGuard struct {
	dialer   *net.Dialer
	resolver *net.Resolver
	// blocked lists ranges netip's predicates do not cover.
	blocked []netip.Prefix
}

// newAddressGuard guards dialer, setting its Control.
func newAddressGuard(dialer *net.Dialer) *addressGuard {
	g := &addressGuard{dialer: dialer, resolver: net.DefaultResolver, blocked: []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
		netip.MustParsePrefix("100.64.0.0/10"),   // CGNAT (RFC 6598)
		netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
		netip.MustParsePrefix("192.0.2.0/24"),    // documentation
		netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
		netip.MustParsePrefix("198.51.100.0/24"), // documentation
		netip.MustParsePrefix("203.0.113.0/24"),  // documentation
		netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast included
		netip.MustParsePrefix("64:ff9b::/96"),    // NAT64: may embed a private IPv4
		netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
		netip.MustParsePrefix("2001:db8::/32"),   // documentation
		netip.MustParsePrefix("fec0::/10"),       // deprecated site-local
	}}
	dialer.Control = g.control
	return g
}

// dialContext is an http.Transport DialContext that only connects to public
// addresses.
func (g *addressGuard) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("dialing %q: %w", address, err)
	}
	addrs, err := g.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", host, err)
	}
	// A host with any non-public address is refused outright, rather than
	// dialled on its public ones: mixing them is a rebinding trick, not a setup.
	for _, a := range addrs {
		if err := g.check(a); err != nil {
			return nil, fmt.Errorf("dialing %s: %w", host, err)
		}
	}
	var errs []error
	for _, a := range addrs {
		conn, err := g.dialer.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dialing %s: %w", host, errors.Join(errs...))
}

// check returns an error wrapping ErrForbiddenAddress unless addr is public.
func (g *addressGuard) check(addr netip.Addr) error {
	addr = addr.Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
	var kind string
	switch {
	case !addr.IsValid():
		kind = "invalid"
	case addr.IsLoopback():
		kind = "loopback"
	case addr.IsPrivate():
		kind = "private"
	case addr.IsLinkLocalUnicast():
		kind = "link-local"
	case addr.IsUnspecified():
		kind = "unspecified"
	case addr.IsMulticast(), addr.IsLinkLocalMulticast(), addr.IsInterfaceLocalMulticast():
		kind = "multicast"
	default:
		for _, p := range g.blocked {
			if p.Contains(addr) {
				kind = "reserved (" + p.String() + ")"
				break
			}
		}
	}
	if kind == "" {
		return nil
	}
	return fmt.Errorf("refusing to connect to %s, a %s address: %w", addr, kind, ErrForbiddenAddress)
}

// control is a net.Dialer Control function: it runs after resolution and before
// connect, for every address the dialer tries.
func (g *addressGuard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("refusing to connect to %q, not an IP address and port: %w", address, ErrForbiddenAddress)
	}
	return g.check(ap.Addr())
}
