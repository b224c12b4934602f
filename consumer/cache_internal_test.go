package consumer

import (
	"strconv"
	"testing"
)

// TestSensorCache checks that every key keeps one slot of its own through the
// index's growth and after a reset.
func TestSensorCache(t *testing.T) {
	t.Parallel()
	const sensors = 50_000
	keys := make([]sensorKey, sensors)
	for i := range keys {
		keys[i] = keyOf([]byte("s" + strconv.Itoa(i)))
	}
	keys[0] = keyOf([]byte("0123456789aBcDeF")) // the longest id fills the key
	c := newSensorCache()
	for round := range 2 {
		slots := map[int32]bool{}
		for i, k := range keys {
			s := c.slot(k)
			if slots[s] {
				t.Fatalf("round %d: key %d got slot %d, which another key has", round, i, s)
			}
			slots[s] = true
			c.at(s).offset = int64(i)
		}
		if c.len() != sensors {
			t.Fatalf("round %d: %d slots for %d keys", round, c.len(), sensors)
		}
		for i, k := range keys {
			s := c.slot(k)
			if got := c.at(s); got.key != k || got.offset != int64(i) {
				t.Fatalf("round %d: key %d found slot %d holding %+v", round, i, s, got)
			}
		}
		if got := keys[0].String(); got != "0123456789aBcDeF" {
			t.Fatalf("key of the longest id reads %q", got)
		}
		if got := keys[7].String(); got != "s7" {
			t.Fatalf("key of s7 reads %q", got)
		}
		c.reset()
		if c.len() != 0 {
			t.Fatalf("after reset the cache holds %d slots", c.len())
		}
	}
}

// BenchmarkSensorCache measures the lookup every valid reading costs: a
// partition worker's cache of 100,000 sensors, hit in a scattered order.
func BenchmarkSensorCache(b *testing.B) {
	const sensors = 100_000
	keys := make([]sensorKey, sensors)
	for i := range keys {
		keys[i] = keyOf([]byte("b" + strconv.FormatInt(int64(i), 36)))
	}
	c := newSensorCache()
	for _, k := range keys {
		c.slot(k)
	}
	i := 0
	for b.Loop() {
		i = (i + 7919) % sensors
		if c.at(c.slot(keys[i])).key != keys[i] {
			b.Fatal("wrong slot")
		}
	}
}
