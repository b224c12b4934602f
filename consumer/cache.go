package consumer

import (
	"bytes"
	"hash/maphash"

	"github.com/lockstream/lockstream/reading"
)

// sensorKey is a sensor id as a cache key: the id's bytes, zero-padded. Ids are
// letters and digits, so the padding cannot be mistaken for part of an id; and a
// key holds no pointer, so looking one up needs no allocation and a cache of a
// million sensors gives the garbage collector nothing to scan.
type sensorKey [reading.MaxSensorIDLen]byte

func keyOf(id []byte) sensorKey {
	var k sensorKey
	copy(k[:], id)
	return k
}

func (k sensorKey) String() string {
	n := bytes.IndexByte(k[:], 0)
	if n < 0 {
		n = len(k)
	}
	return string(k[:n])
}

// cached is what a partition worker knows about one registered sensor, as read
// from Postgres and kept up to date by the worker's batches; unregistered sensors
// are never cached. It holds no pointers (see sensorKey).
type cached struct {
	key sensorKey
	// known is false until the sensor's first reading.
	known bool
	data  int8
	// topic (the worker's number for a topic id, see worker.topicIndex),
	// partition and offset locate the reading that set data; changedAt is its
	// receive time in Unix nanoseconds.
	topic     uint16
	partition int32
	offset    int64
	changedAt int64
	// The batch that last saw the sensor and changed it; with them a batch needs
	// no maps of its own. seenAt is the latest receive time within batch seenIn,
	// in Unix nanoseconds.
	seenIn, changedIn uint64
	seenAt            int64
	// Flapping: flapStart (Unix ns) begins the window the sensor's last
	// flapCount changes fell in; unstableSince (Unix ns, 0 = stable) began its
	// current streak of too many changes (stored with the state).
	flapStart, unstableSince int64
	flapCount                int32
}

// chunkBits sizes the chunks sensorCache keeps its slots in: 4,096 slots.
const chunkBits = 12

// minIndexBits sizes a new sensorCache's index: 1,024 entries.
const minIndexBits = 10

// sensorCache is a partition worker's cache: slots, found through an index.
//
// Slots live in fixed-size chunks, so they never move (a batch refers to its
// sensors by slot number after one lookup each) and a growing cache never copies
// them. The index is an open-addressing hash table of slot numbers, at most half
// full, whose entries are eight bytes: a probe usually touches one cache line of
// it and then the slot, which the batch reads anyway. (A Go map keyed by
// sensorKey took three to four times as long per lookup, and the lookup is paid
// by every reading.) The hash is seeded per cache, so ids chosen to collide
// cannot slow it down.
type sensorCache struct {
	seed maphash.Seed
	// index entries hold the upper 32 bits of their key's hash and, below them,
	// the slot number plus one; zero is an empty entry. A key's probe starts at
	// the entry numbered by the top bits of its hash.
	index  []uint64
	bits   uint
	chunks [][]cached
	n      int32
}

func newSensorCache() sensorCache {
	return sensorCache{seed: maphash.MakeSeed(), index: make([]uint64, 1<<minIndexBits), bits: minIndexBits}
}

// lookup returns the number of k's slot, if k has one.
func (c *sensorCache) lookup(k sensorKey) (int32, bool) {
	h := uint32(maphash.Bytes(c.seed, k[:]) >> 32)
	if e := c.index[c.probe(h, k)]; e != 0 {
		return int32(uint32(e)) - 1, true
	}
	return 0, false
}

// slot returns the number of k's slot, adding an empty one if k is new.
func (c *sensorCache) slot(k sensorKey) int32 {
	h := uint32(maphash.Bytes(c.seed, k[:]) >> 32)
	i := c.probe(h, k)
	if e := c.index[i]; e != 0 {
		return int32(uint32(e)) - 1
	}
	if int(c.n+1)*2 > len(c.index) {
		c.grow()
		i = c.probe(h, k)
	}
	s := c.n
	c.n++
	if int(s>>chunkBits) == len(c.chunks) {
		c.chunks = append(c.chunks, make([]cached, 1<<chunkBits))
	}
	*c.at(s) = cached{key: k}
	c.index[i] = uint64(h)<<32 | uint64(uint32(s+1))
	return s
}

// probe returns the index entry that holds k (hash h) or the empty one where it
// belongs.
func (c *sensorCache) probe(h uint32, k sensorKey) int {
	mask := len(c.index) - 1
	i := int(h >> (32 - c.bits))
	for {
		e := c.index[i]
		if e == 0 || uint32(e>>32) == h && c.at(int32(uint32(e))-1).key == k {
			return i
		}
		i = (i + 1) & mask
	}
}

// grow doubles the index. Entries carry their hash, so no key is hashed again.
func (c *sensorCache) grow() {
	old := c.index
	c.bits++
	c.index = make([]uint64, 1<<c.bits)
	mask := len(c.index) - 1
	for _, e := range old {
		if e == 0 {
			continue
		}
		i := int(uint32(e>>32) >> (32 - c.bits))
		for c.index[i] != 0 {
			i = (i + 1) & mask
		}
		c.index[i] = e
	}
}

// at returns slot i.
func (c *sensorCache) at(i int32) *cached {
	return &c.chunks[i>>chunkBits][i&(1<<chunkBits-1)]
}

func (c *sensorCache) len() int { return int(c.n) }

// reset empties the cache, keeping its memory for reuse.
func (c *sensorCache) reset() {
	clear(c.index)
	c.n = 0
}
