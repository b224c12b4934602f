// Package streamtest gives tests a Kafka cluster: an in-process kfake broker of
// their own, closed when the test ends, or the external cluster named by
// LOCKSTREAM_TEST_KAFKA_BROKERS (comma-separated host:port), where each test gets
// topics under a prefix of its own.
package streamtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lockstream/lockstream/stream"
)

// BrokersEnv names the variable that points tests at an external cluster.
const BrokersEnv = "LOCKSTREAM_TEST_KAFKA_BROKERS"

// Cluster returns the broker addresses of a cluster for t: a fresh single-broker
// kfake cluster closed at the end of t, or the external cluster of BrokersEnv.
func Cluster(t testing.TB) []string {
	t.Helper()
	if env := os.Getenv(BrokersEnv); env != "" {
		return strings.Split(env, ",")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// Config returns a stream config for t with its topics created (partitions each):
// on kfake the names of DESIGN.md, on an external cluster the same names under a
// prefix unique to t.
func Config(t testing.TB, partitions int) stream.Config {
	t.Helper()
	cfg := stream.Config{Brokers: Cluster(t), Partitions: partitions}
	if os.Getenv(BrokersEnv) != "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		cfg.TopicPrefix = "test_" + hex.EncodeToString(b) + "."
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := Client(t, cfg)
	if err := stream.EnsureTopics(ctx, client, cfg); err != nil {
		t.Fatalf("creating topics: %v", err)
	}
	return cfg
}

// Client returns a plain client of cfg's cluster (producer, no group), closed at
// the end of t. Extra options are appended to stream.ClientOpts.
func Client(t testing.TB, cfg stream.Config, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	client, err := kgo.NewClient(append(stream.ClientOpts(cfg), opts...)...)
	if err != nil {
		t.Fatalf("creating kafka client: %v", err)
	}
	t.Cleanup(client.Close)
	return client
}

// ReadAll returns every record of topic, partition by partition in offset order,
// up to the end offsets it finds when called.
func ReadAll(t testing.TB, cfg stream.Config, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := EndOffsets(ctx, Client(t, cfg), topic)
	if err != nil {
		t.Fatalf("reading end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	for p, end := range ends {
		if end > 0 {
			want[p] = end
			offsets[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(want) == 0 {
		return nil
	}
	client := Client(t, cfg, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
	byPartition := map[int32][]*kgo.Record{}
	for len(want) > 0 {
		fetches := client.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: still waiting for partitions %v: %v", topic, want, err)
		}
		fetches.EachError(func(topic string, p int32, err error) {
			t.Fatalf("reading %s/%d: %v", topic, p, err)
		})
		fetches.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			byPartition[r.Partition] = append(byPartition[r.Partition], r)
			if r.Offset == end-1 {
				delete(want, r.Partition)
			}
		})
	}
	var out []*kgo.Record
	for p := range int32(len(ends)) {
		out = append(out, byPartition[p]...)
	}
	return out
}

// EndOffsets returns the high watermark of each partition of topic.
func EndOffsets(ctx context.Context, client *kgo.Client, topic string) (map[int32]int64, error) {
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	metaResp, err := meta.RequestWith(ctx, client)
	if err != nil {
		return nil, err
	}
	if len(metaResp.Topics) != 1 {
		return nil, errors.New("metadata: topic missing from the answer")
	}
	if err := kerr.ErrorForCode(metaResp.Topics[0].ErrorCode); err != nil {
		return nil, err
	}
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range metaResp.Topics[0].Partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p.Partition
		rp.Timestamp = -1 // latest
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	// Partitions may have different leaders; kgo splits the request per broker.
	shards := client.RequestSharded(ctx, req)
	ends := map[int32]int64{}
	for _, shard := range shards {
		if shard.Err != nil {
			return nil, shard.Err
		}
		resp := shard.Resp.(*kmsg.ListOffsetsResponse)
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, err
				}
				ends[p.Partition] = p.Offset
			}
		}
	}
	return ends, nil
}

// Committed returns group's committed offset per partition of topic (partitions
// with none are left out).
func Committed(ctx context.Context, client *kgo.Client, group, topic string) (map[int32]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	resp, err := req.RequestWith(ctx, client)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, rt := range resp.Topics {
		if rt.Topic != topic {
			continue
		}
		for _, p := range rt.Partitions {
			if p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out, nil
}

// TopicID returns topic's Kafka topic id (zero when the broker sends none).
func TopicID(t testing.TB, cfg stream.Config, topic string) [16]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, mt)
	resp, err := req.RequestWith(ctx, Client(t, cfg))
	if err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	if len(resp.Topics) != 1 {
		t.Fatalf("metadata of %s: %d topics in the answer", topic, len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	return resp.Topics[0].TopicID
}
