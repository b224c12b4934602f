package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The soak's fleet publishes over AMQP and MQTT to brokers that the driver
// restarts. Its publishers ride the restarts out: a publish that fails, or
// that the broker does not confirm (AMQP publisher confirms, an MQTT PUBACK),
// drops the connection and reports false, the fleet publishes the very same
// message again, and the next publish dials anew. A message counts as
// published only once confirmed; one that went out unconfirmed may arrive
// twice, which the soak's checks allow (a reading repeated, a DLQ copy, a
// notification's message-id).
//
// An MQTT PUBACK with reason code 0x10 (No matching subscribers) is not a
// confirmation either: the broker accepted the message and delivered it to no
// one. Mosquitto before 2.0.12 (Debian 12 ships 2.0.11) drops a session's
// $share subscriptions when its client reconnects to it, until the client
// subscribes again (fixed upstream by "Fix $share subscriptions not being
// recovered for durable clients that reconnect"); the bridges subscribe again
// on every connection, but right after a broker restart every bridge
// reconnects at once and for a moment the group has no member. A message
// published then is discarded with that reason code. The fleet publishes it
// again, as a sensor that must not lose it would; bridge/mqtt's package
// documentation states the limit.

// soakPublishTimeout bounds one publish and its confirm: a broker that went
// away mid-publish is noticed at the latest then.
const soakPublishTimeout = 10 * time.Second

// publishCounts is what a publisher did.
type publishCounts struct {
	confirmed, unconfirmed, dials int
	// noSubscribers counts the MQTT PUBACKs with reason code 0x10 (No
	// matching subscribers), published again; unconfirmed counts them too.
	noSubscribers int
}

func (c publishCounts) String() string {
	s := fmt.Sprintf("%d confirmed, %d failed or unconfirmed (published again), %d connections", c.confirmed, c.unconfirmed, c.dials)
	if c.noSubscribers > 0 {
		s += fmt.Sprintf(", %d of them acknowledged with no matching subscribers", c.noSubscribers)
	}
	return s
}

// soakAMQP publishes to one exchange with publisher confirms.
type soakAMQP struct {
	url, exchange string

	mu     sync.Mutex
	conn   *amqp091.Connection
	ch     *amqp091.Channel
	counts publishCounts
}

// publish publishes msg with routing key and reports whether the broker
// confirmed it.
func (p *soakAMQP) publish(ctx context.Context, key string, msg amqp091.Publishing) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil && !p.dial() {
		p.counts.unconfirmed++
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, soakPublishTimeout)
	defer cancel()
	c, err := p.ch.PublishWithDeferredConfirmWithContext(pctx, p.exchange, key, false, false, msg)
	if err == nil {
		var ok bool
		if ok, err = c.WaitContext(pctx); err == nil && ok {
			p.counts.confirmed++
			return true
		}
	}
	p.counts.unconfirmed++
	p.drop()
	return false
}

// dial connects and opens a confirming channel.
func (p *soakAMQP) dial() bool {
	p.counts.dials++
	conn, err := amqp091.DialConfig(p.url, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second),
		Properties: amqp091.Table{"connection_name": "soak-fleet"}})
	if err != nil {
		return false
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		_ = conn.CloseDeadline(time.Now().Add(time.Second))
		return false
	}
	p.conn, p.ch = conn, ch
	return true
}

// drop closes the connection, if any; the next publish dials again.
func (p *soakAMQP) drop() {
	if p.conn != nil {
		_ = p.conn.CloseDeadline(time.Now().Add(time.Second))
	}
	p.conn, p.ch = nil, nil
}

// close ends the publisher (the test's end).
func (p *soakAMQP) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop()
}

func (p *soakAMQP) figures() publishCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts
}

// soakMQTT publishes at QoS 1 over a clean MQTT 5 session.
type soakMQTT struct {
	url, clientID string

	mu     sync.Mutex
	conn   net.Conn
	client *paho.Client
	counts publishCounts
}

// publish publishes payload to topic and reports whether the broker
// acknowledged it (PUBACK) with a subscriber to deliver it to.
func (p *soakMQTT) publish(ctx context.Context, topic string, payload []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil {
		select {
		case <-p.client.Done(): // the broker closed the connection
			p.drop()
		default:
		}
	}
	if p.client == nil && !p.dial(ctx) {
		p.counts.unconfirmed++
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, soakPublishTimeout)
	defer cancel()
	pr, err := p.client.Publish(pctx, &paho.Publish{Topic: topic, QoS: 1, Payload: payload})
	if err != nil {
		p.counts.unconfirmed++
		p.drop()
		return false
	}
	if pr.ReasonCode == mqttNoMatchingSubscribers { // see the top of this file; the connection is fine
		p.counts.unconfirmed++
		p.counts.noSubscribers++
		return false
	}
	p.counts.confirmed++
	return true
}

// mqttNoMatchingSubscribers is the PUBACK reason code of a message the broker
// delivered to no one (MQTT 5, 3.4.2.1).
const mqttNoMatchingSubscribers = 0x10

// dial connects with a clean start.
func (p *soakMQTT) dial(ctx context.Context) bool {
	p.counts.dials++
	u, err := url.Parse(p.url)
	if err != nil {
		return false
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		return false
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Connect(cctx, &paho.Connect{ClientID: p.clientID, CleanStart: true, KeepAlive: 30}); err != nil {
		_ = conn.Close()
		return false
	}
	p.conn, p.client = conn, c
	return true
}

// drop ends the connection, if any; the next publish dials again.
func (p *soakMQTT) drop() {
	if p.client != nil {
		_ = p.client.Disconnect(&paho.Disconnect{})
		_ = p.conn.Close()
	}
	p.conn, p.client = nil, nil
}

// close ends the publisher (the test's end).
func (p *soakMQTT) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop()
}

func (p *soakMQTT) figures() publishCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts
}
