package stream

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Embedded is an in-process Kafka broker (franz-go's kfake, which speaks the real
// protocol, so kcat and any other client can use it) that keeps its log in a
// directory, so readings produced before a restart are still there after it.
//
// It is for single-node and demo use: one broker, no replication, and a log that
// is synced to disk on segment roll and on Close, like Kafka's default; a crash of
// the process can lose the newest acknowledged records.
type Embedded struct {
	cluster *kfake.Cluster
	addrs   []string
}

// StartEmbedded starts a broker listening on addr (host:port, for instance
// "127.0.0.1:9092"; port 0 picks a free one) with its log in dir, and creates
// lockstream's topics with partitions partitions each unless the log already holds
// them (0 means DefaultPartitions). Close it to flush the log.
func StartEmbedded(ctx context.Context, dir, addr string, partitions int) (*Embedded, error) {
	if partitions < 1 {
		partitions = DefaultPartitions
	}
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("embedded broker address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("embedded broker address %q: bad port: %w", addr, err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("creating embedded broker directory: %w", err)
	}
	cluster, err := kfake.NewCluster(
		kfake.Ports(port), // one broker
		// kfake always asks for 127.0.0.1; listen where we were told instead.
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			var lc net.ListenConfig
			return lc.Listen(ctx, network, net.JoinHostPort(host, portText))
		}),
		kfake.DataDir(dir),
		kfake.DefaultNumPartitions(partitions),
	)
	if err != nil {
		return nil, fmt.Errorf("starting embedded broker on %s: %w", addr, err)
	}
	e := &Embedded{cluster: cluster, addrs: cluster.ListenAddrs()}

	client, err := kgo.NewClient(ClientOpts(Config{Brokers: e.addrs})...)
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("connecting to embedded broker: %w", err)
	}
	defer client.Close()
	if err := EnsureTopics(ctx, client, Config{Brokers: e.addrs, Partitions: partitions}); err != nil {
		e.Close()
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	return e, nil
}

// Addrs returns the addresses the broker listens on, for Config.Brokers.
func (e *Embedded) Addrs() []string {
	return e.addrs
}

// Close stops the broker and writes its state to disk. It is safe to call twice.
func (e *Embedded) Close() {
	e.cluster.Close()
}
