package servicetest

import (
	"context"
	"net"
	neturl "net/url"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// A committed row survives the private cluster's fast restart.
func TestPostgresRestartKeepsCommittedRows(t *testing.T) {
	t.Parallel()
	p := StartPostgres(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, p.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`CREATE TABLE kept (v int)`)
	exec(`INSERT INTO kept VALUES (7)`)
	p.Restart()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, p.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v int
	if err := conn.QueryRow(ctx, `SELECT v FROM kept`).Scan(&v); err != nil || v != 7 {
		t.Fatalf("after the restart: %d, %v; want 7", v, err)
	}
}

// The private Redis answers again after its restart, with the keys of before
// (its append-only file).
func TestRedisRestartKeepsKeys(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	opts, err := redis.ParseURL(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	defer client.Close()
	ctx := context.Background()
	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Restart()
	if v, err := client.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after the restart: %q, %v; want v", v, err)
	}
}

// A QoS 1 message the broker accepted for a persistent session that is away
// is delivered after the broker's restart.
func TestMosquittoRestartKeepsSessions(t *testing.T) {
	t.Parallel()
	m := StartMosquitto(t)
	got := make(chan string, 1)
	sub := mqttClient(t, m.URL, "sub", false, func(pr paho.PublishReceived) (bool, error) {
		got <- string(pr.Packet.Payload)
		return true, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "t", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	_ = sub.Disconnect(&paho.Disconnect{})
	pub := mqttClient(t, m.URL, "pub", true, nil)
	if _, err := pub.Publish(ctx, &paho.Publish{Topic: "t", QoS: 1, Payload: []byte("kept")}); err != nil {
		t.Fatal(err)
	}
	m.Restart()
	mqttClient(t, m.URL, "sub", false, func(pr paho.PublishReceived) (bool, error) {
		got <- string(pr.Packet.Payload)
		return true, nil
	})
	select {
	case v := <-got:
		if v != "kept" {
			t.Fatalf("got %q, want kept", v)
		}
	case <-ctx.Done():
		t.Fatal("the queued message did not come after the restart")
	}
}

// mqttClient connects id to the broker at u, with a session that outlives
// the connection unless clean.
func mqttClient(t *testing.T, u, id string, clean bool, onPublish func(paho.PublishReceived) (bool, error)) *paho.Client {
	t.Helper()
	parsed, _ := neturl.Parse(u)
	conn, err := net.DialTimeout("tcp", parsed.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cfg := paho.ClientConfig{Conn: conn}
	if onPublish != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){onPublish}
	}
	c := paho.NewClient(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	expiry := uint32(600)
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: clean, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c
}
