// Package stream is the Kafka side every lockstream daemon shares: the topic names,
// the client options built from configuration, topic creation and the embedded
// broker that `lockstream all` starts when no brokers are configured.
//
// It does not wrap franz-go: daemons build their own *kgo.Client from ClientOpts plus
// the options of their role (consumer group, callbacks), so every kgo feature stays
// reachable.
package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The topics of DESIGN.md.
const (
	// TopicReadings carries sensor readings, keyed by sensor id.
	TopicReadings = "lockstream.readings"
	// TopicEvents carries state_changed, connection_lost and connection_restored
	// events, keyed by sensor id.
	TopicEvents = "lockstream.events"
	// TopicReadingsDLQ carries every rejected reading as received, with the reason
	// in the "error" header and its origin in the "source" header.
	TopicReadingsDLQ = "lockstream.readings.dlq"
)

// DefaultPartitions is the partition count of topics lockstream creates.
const DefaultPartitions = 12

// Config says where the Kafka cluster is and how lockstream's topics look.
type Config struct {
	// Brokers are the seed brokers (host:port). Required; with none configured,
	// `lockstream all` starts an embedded broker and fills this in.
	Brokers []string
	// Partitions is the partition count of the topics EnsureTopics creates. It
	// bounds how many consumer processes share the work. Existing topics are left
	// as they are. Defaults to DefaultPartitions (12).
	Partitions int
	// TopicPrefix is put before every topic name. Defaults to empty, the names of
	// DESIGN.md; tests that share one external cluster set a prefix of their own so
	// they do not read each other's records.
	TopicPrefix string
	// ClientID names this process to the brokers, in their logs and quotas.
	// Defaults to DefaultClientID ("lockstream").
	ClientID string
}

// DefaultClientID is the client id lockstream's Kafka clients send.
const DefaultClientID = "lockstream"

// WithDefaults returns the config with every unset field set to its default.
func (c Config) WithDefaults() Config {
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	return c
}

// Validate reports the first field that cannot work.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("stream config: Brokers: at least one broker is required")
	}
	for _, b := range c.Brokers {
		if strings.TrimSpace(b) == "" {
			return errors.New("stream config: Brokers: empty broker address")
		}
	}
	if c.Partitions < 1 {
		return fmt.Errorf("stream config: Partitions: %d, want at least 1", c.Partitions)
	}
	return nil
}

// ReadingsTopic is the readings topic's name under this config's prefix.
func (c Config) ReadingsTopic() string { return c.TopicPrefix + TopicReadings }

// EventsTopic is the events topic's name under this config's prefix.
func (c Config) EventsTopic() string { return c.TopicPrefix + TopicEvents }

// DLQTopic is the dead-letter topic's name under this config's prefix.
func (c Config) DLQTopic() string { return c.TopicPrefix + TopicReadingsDLQ }

// ClientOpts returns the kgo options every lockstream client starts from: seed
// brokers, client id and an idempotent producer waiting for all in-sync replicas
// (the kgo default, stated here so nobody loosens it by accident). Daemons append
// their own options (consumer group, topics, callbacks, WithLogger).
func ClientOpts(cfg Config) []kgo.Opt {
	cfg = cfg.WithDefaults()
	return []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Readings are small; a batch reaching the broker sooner shortens every
		// consumer batch that waits for its events to be acknowledged, and
		// every reading on its way to a webhook (issue 21: lingers of 1 ms or
		// less). Batches still fill while a request is in flight.
		kgo.ProducerLinger(time.Millisecond),
	}
}

// WithLogger returns the kgo option that sends the client's log lines to logger:
// warnings and errors as such, everything else at debug level.
func WithLogger(logger *slog.Logger) kgo.Opt {
	return kgo.WithLogger(slogLogger{logger})
}

// EnsureTopics creates cfg's readings, events and DLQ topics with partitions
// partitions each, unless they exist (their partition count is then left alone).
// The readings topic asks for broker time (LogAppendTime) as record timestamps,
// so on Kafka a reading's time is when the server received it, never the
// device's clock. (kfake accepts the setting but keeps the producer's time,
// which for lockstream's producers is the server's clock too.)
func EnsureTopics(ctx context.Context, client *kgo.Client, cfg Config) error {
	cfg = cfg.WithDefaults()
	logAppend := "LogAppendTime"
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	for _, name := range []string{cfg.ReadingsTopic(), cfg.EventsTopic(), cfg.DLQTopic()} {
		t := kmsg.NewCreateTopicsRequestTopic()
		t.Topic = name
		t.NumPartitions = int32(cfg.Partitions)
		t.ReplicationFactor = -1 // the broker's default
		if name == cfg.ReadingsTopic() {
			c := kmsg.NewCreateTopicsRequestTopicConfig()
			c.Name = "message.timestamp.type"
			c.Value = &logAppend
			t.Configs = append(t.Configs, c)
		}
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, client)
	if err != nil {
		return fmt.Errorf("creating topics: %w", err)
	}
	var errs []error
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			msg := ""
			if t.ErrorMessage != nil {
				msg = ": " + *t.ErrorMessage
			}
			errs = append(errs, fmt.Errorf("creating topic %s: %w%s", t.Topic, err, msg))
		}
	}
	return errors.Join(errs...)
}

// slogLogger sends kgo's log lines to slog. Kafka client chatter is debug-level
// except for warnings and errors.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case s.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelDebug
	case s.l.Enabled(ctx, slog.LevelInfo):
		return kgo.LogLevelInfo
	case s.l.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	default:
		return kgo.LogLevelError
	}
}

func (s slogLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var l slog.Level
	switch level {
	case kgo.LogLevelError:
		l = slog.LevelError
	case kgo.LogLevelWarn:
		l = slog.LevelWarn
	case kgo.LogLevelInfo:
		// kgo's info lines (joins, assignments) are routine for lockstream.
		l = slog.LevelDebug
	default:
		l = slog.LevelDebug
	}
	s.l.Log(context.Background(), l, msg, keyvals...)
}
