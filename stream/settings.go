package stream

import "github.com/lockstream/lockstream/internal/settings"

// RegisterSettings declares the Kafka settings of a process.
func (c *Config) RegisterSettings(s *settings.Set) {
	s.List(&c.Brokers, nil, settings.Decl{Name: "kafka-brokers",
		Doc: "comma-separated Kafka brokers; empty: all embeds a broker on 127.0.0.1:9092, bench one of its own, simulate uses a running all's"})
	s.String(&c.TopicPrefix, "", settings.Decl{Name: "kafka-topic-prefix",
		Doc: "put before every topic name, so several deployments can share a cluster"})
	s.Int(&c.Partitions, DefaultPartitions, settings.Decl{Name: "kafka-partitions", Doc: "partitions of the topics lockstream creates"})
}
