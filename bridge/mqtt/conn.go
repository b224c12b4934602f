package mqtt

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"strings"
	"sync"

	"github.com/eclipse/paho.golang/autopaho"
)

// readBuffer is the size of a connection's read buffer: many small MQTT
// packets per read.
const readBuffer = 64 << 10

// bufferedConn reads through a buffer: paho reads each packet's header a byte at
// a time, which unbuffered costs several system calls per message. It is a
// sync.Locker, as paho requires of a connection several goroutines write to (it
// locks around each packet's writes).
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
	sync.Mutex
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// dial is autopaho's AttemptConnection: TCP, or TLS for mqtts/tls/ssl, with a
// buffered reader.
func dial(ctx context.Context, cfg autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
	var (
		conn net.Conn
		err  error
	)
	switch strings.ToLower(u.Scheme) {
	case "mqtts", "tls", "ssl":
		tcfg := cfg.TlsCfg
		if tcfg == nil {
			tcfg = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
		}
		conn, err = (&tls.Dialer{Config: tcfg}).DialContext(ctx, "tcp", u.Host)
	default:
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", u.Host)
	}
	if err != nil {
		return nil, err
	}
	return &bufferedConn{Conn: conn, r: bufio.NewReaderSize(conn, readBuffer)}, nil
}
