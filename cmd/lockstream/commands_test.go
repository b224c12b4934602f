package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockstream/lockstream/bridge/bridgetest"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// Every daemon command starts on its own settings alone and stops cleanly when its
// context ends.
func TestEveryDaemonCommandStartsAndStops(t *testing.T) {
	stores := storagetest.New(t)
	kafka := streamtest.Config(t, 1)
	for k, v := range map[string]string{
		"LOCKSTREAM_PG_URL":             stores.PostgresURL,
		"LOCKSTREAM_CLICKHOUSE_URL":     stores.ClickHouseURL,
		"LOCKSTREAM_REDIS_URL":          stores.RedisURL,
		"LOCKSTREAM_REDIS_PREFIX":       stores.RedisPrefix,
		"LOCKSTREAM_KAFKA_BROKERS":      strings.Join(kafka.Brokers, ","),
		"LOCKSTREAM_KAFKA_TOPIC_PREFIX": kafka.TopicPrefix,
		"LOCKSTREAM_KAFKA_PARTITIONS":   "1",
		"LOCKSTREAM_ADMIN_TOKEN":        "admin-token",
		"LOCKSTREAM_INGEST_TOKEN":       "ingest-token",
		"LOCKSTREAM_DATA_DIR":           t.TempDir(),
		"LOCKSTREAM_SHUTDOWN_DELAY":     "0s", // stopped by the test: nobody to drain for
	} {
		t.Setenv(k, v)
	}
	for _, c := range commands() {
		switch c.name {
		case "migrate", "simulate", "bench", "config", "webhook-sink", "fake-swrve":
			continue // tools, not daemons; migrate is covered by the migrations tests
		}
		t.Run(c.name, func(t *testing.T) {
			httpAddr, metricsAddr := freeAddr(t), freeAddr(t)
			t.Setenv("LOCKSTREAM_HTTP_ADDR", httpAddr)
			t.Setenv("LOCKSTREAM_METRICS_ADDR", metricsAddr)
			if c.name == "bridge" {
				bridgeBrokers(t)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var logs syncBuffer
			exited := make(chan int, 1)
			go func() { exited <- run(ctx, []string{c.name}, io.Discard, &logs) }()
			// Let every daemon get going, then stop them all.
			waitUntil(t, c.name+" logs that its daemons started", func() bool {
				select {
				case code := <-exited:
					t.Fatalf("%s exited %d before it was stopped; log:\n%s", c.name, code, logs.String())
				default:
				}
				return strings.Count(logs.String(), "daemon starting") >= 1
			})
			// The probes of deploy/k8s: /healthz and /readyz where the process serves
			// HTTP (the API's address for api and all, LOCKSTREAM_METRICS_ADDR else).
			probeAddr := metricsAddr
			if c.name == "api" || c.name == "all" {
				probeAddr = httpAddr
			}
			for _, path := range []string{"/healthz", "/readyz"} {
				waitUntil(t, c.name+" answers "+path, func() bool {
					resp, err := http.Get("http://" + probeAddr + path)
					if err != nil {
						return false
					}
					resp.Body.Close()
					return resp.StatusCode == http.StatusOK
				})
			}
			cancel()
			select {
			case code := <-exited:
				if code != 0 {
					t.Fatalf("%s exited %d on stop; log:\n%s", c.name, code, logs.String())
				}
			case <-time.After(waitLimit):
				t.Fatalf("%s did not stop within %v", c.name, waitLimit)
			}
		})
	}
}

// bridgeBrokers points the bridge at the local RabbitMQ and Mosquitto, on an
// exchange, queue, topic and session of the test's own.
func bridgeBrokers(t *testing.T) {
	t.Helper()
	broker := bridgetest.DialAMQP(t)
	suffix := bridgetest.Suffix(t)
	broker.Exchange("lstest." + suffix)
	broker.DeleteQueueAtEnd("lstest.recorder." + suffix)
	bridgetest.EndSession(t, "lstest-bridge-"+suffix)
	for k, v := range map[string]string{
		"LOCKSTREAM_AMQP_URL":       broker.URL,
		"LOCKSTREAM_AMQP_EXCHANGE":  "lstest." + suffix,
		"LOCKSTREAM_AMQP_QUEUE":     "lstest.recorder." + suffix,
		"LOCKSTREAM_MQTT_URL":       bridgetest.MQTTURL(t),
		"LOCKSTREAM_MQTT_TOPIC":     "lstest/" + suffix + "/readings/+",
		"LOCKSTREAM_MQTT_CLIENT_ID": "lstest-bridge-" + suffix,
	} {
		t.Setenv(k, v)
	}
}
