package consumer_test

import (
	"testing"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/history"
)

// TestScale is TestKnownPattern at the size the stream issue asks for: 10,000
// sensors and 200,000 records over 12 partitions, with repeats, flips and one bad
// record in nine (broken JSON, data out of range, over-long ids, mismatched and
// missing keys, unknown fields, bad times, a few over 64 KiB), through the state
// consumer and the history writer at their default settings. sensor_state, the
// events topic (in order per sensor), the DLQ (with reasons) and ClickHouse's
// readings and events must come out exactly as derived from the records.
func TestScale(t *testing.T) {
	t.Parallel()
	runKnownPattern(t, knownPattern{seed: 10, sensors: 10_000, records: 200_000,
		consumer: consumer.Config{}, history: history.Config{}})
}
