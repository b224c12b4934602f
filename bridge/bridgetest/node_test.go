package bridgetest

import (
	"context"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// A persistent message confirmed into a durable queue is there after the
// node's restart, and the node takes connections again.
func TestNodeRestartKeepsPersistentMessages(t *testing.T) {
	t.Parallel()
	node := StartNode(t)
	ch := DialAMQPURL(t, node.URL).Channel()
	if _, err := ch.QueueDeclare("kept", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "kept", false, false,
		amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("kept")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("not confirmed: %v, %v", ok, err)
	}
	node.Restart()
	if n := node.QueueMessages("kept"); n != 1 {
		t.Fatalf("after the restart the queue holds %d messages, want 1", n)
	}
	DialAMQPURL(t, node.URL)
}
