package heartbeat

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockstream/lockstream/storage"
)

// roundTrips is a go-redis hook that counts round trips (a command, or a whole
// pipeline) and the elements the commands' replies carry.
type roundTrips struct {
	mu       sync.Mutex
	trips    int
	elements int
	commands []string
}

func (c *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c.record(cmd)
		return err
	}
}

func (c *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		c.record(cmds...)
		return err
	}
}

func (c *roundTrips) record(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trips++
	for _, cmd := range cmds {
		c.commands = append(c.commands, strings.TrimSpace(fmt.Sprintln(cmd.Args()...)))
		switch v := cmd.(type) {
		case *redis.StringSliceCmd:
			c.elements += len(v.Val())
		case *redis.SliceCmd:
			c.elements += len(v.Val())
		case *redis.FloatSliceCmd:
			c.elements += len(v.Val())
		case *redis.Cmd:
			if items, ok := v.Val().([]any); ok {
				c.elements += len(items)
			} else {
				c.elements++
			}
		default:
			c.elements++
		}
	}
}

// take returns what was counted since the last take and starts again.
func (c *roundTrips) take() (trips, elements int, commands []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	trips, elements, commands = c.trips, c.elements, c.commands
	c.trips, c.elements, c.commands = 0, 0, nil
	return trips, elements, commands
}

// loseSensors records n sensors and has them all claimed lost.
func loseSensors(t *testing.T, r *RedisStore, n int) {
	t.Helper()
	ctx := context.Background()
	batch := make([]Deadline, n)
	for i := range batch {
		batch[i] = dl(fmt.Sprintf("s%05d", i), i%100)
	}
	mustRecord(t, r, batch...)
	for claimed := 0; claimed < n; {
		got, err := r.ClaimHeartbeatExpired(ctx, at(100), MaxBatch, at(1000))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			t.Fatalf("claimed %d of %d", claimed, n)
		}
		claimed += len(got)
	}
}

// A page of the lost set costs the same two round trips and reads about a page,
// whether one page of sensors or 10,000 are lost.
func TestLostPageIsBoundedWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	loseSensors(t, r, 10_000)
	// The first listing of a deployment builds the index's marker; pages after it
	// are what this test measures.
	if _, err := r.LostHeartbeats(ctx, storage.Page{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	hook := &roundTrips{}
	r.client.AddHook(hook)

	const limit = 101
	page := storage.Page{After: "s04999", Limit: limit}
	for range 3 {
		got, err := r.LostHeartbeats(ctx, page)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != limit || got[0].SensorID <= page.After || got[0].Deadline.IsZero() {
			t.Fatalf("page after %q: %d sensors, first %+v", page.After, len(got), got[0])
		}
		trips, elements, commands := hook.take()
		if trips != 2 {
			t.Fatalf("a page took %d round trips, want 2: %q", trips, commands)
		}
		// A page of ids, a page of deadlines, and the index marker.
		if elements > 2*limit+1 {
			t.Fatalf("a page of %d read %d elements: %q", limit, elements, commands)
		}
		for _, c := range commands {
			c = strings.ToLower(c)
			for _, whole := range []string{"hgetall", "hscan", "hkeys", "hvals", "hlen", "zcard"} {
				if strings.HasPrefix(c, whole) {
					t.Fatalf("a page read a whole set: %q", c)
				}
			}
			if strings.HasPrefix(c, "zrange") && !strings.Contains(c, fmt.Sprintf("limit 0 %d", limit)) {
				t.Fatalf("a page read the lost index without a limit: %q", c)
			}
		}
		page.After = got[len(got)-1].SensorID
	}

	// The ids alone are one round trip and a page of them.
	ids, err := r.LostHeartbeatIDs(ctx, page)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != limit || ids[0] <= page.After {
		t.Fatalf("ids after %q: %d, first %q", page.After, len(ids), ids[0])
	}
	if trips, elements, commands := hook.take(); trips != 1 || elements > limit+1 {
		t.Fatalf("a page of ids took %d round trips and %d elements: %q", trips, elements, commands)
	}
}

// Losses kept from before the lost index existed are indexed on the first
// listing, and the listing pages through all of them in id order.
func TestLostIndexIsBuiltForOldLosses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	loseSensors(t, r, 2_500)
	if err := r.client.Del(context.Background(), r.key(hbLostIDs), r.key(hbLostIDsBuilt)).Err(); err != nil {
		t.Fatal(err)
	}
	// One of them reports again before the index is built: it must not be listed.
	mustRecord(t, r, dl("s01234", 5000))
	var ids []string
	page := storage.Page{Limit: 1000}
	for {
		got, err := r.LostHeartbeats(ctx, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range got {
			ids = append(ids, l.SensorID)
		}
		if len(got) < page.Limit {
			break
		}
		page.After = got[len(got)-1].SensorID
	}
	if len(ids) != 2_499 || ids[0] != "s00000" || ids[len(ids)-1] != "s02499" {
		t.Fatalf("listed %d lost sensors, %v … %v", len(ids), ids[:1], ids[len(ids)-1:])
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] || ids[i] == "s01234" {
			t.Fatalf("listing out of order or with a restored sensor at %d: %v", i, ids[i-1:i+1])
		}
	}
}

// The statuses of a page of sensors cost one round trip, however many.
func TestHeartbeatStatusesIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newRedis(t)
	loseSensors(t, r, 500)
	mustRecord(t, r, dl("online", 5000))
	hook := &roundTrips{}
	r.client.AddHook(hook)

	ids := []string{"online", "never"}
	for i := range 998 {
		ids = append(ids, fmt.Sprintf("s%05d", i))
	}
	got, err := r.HeartbeatStatuses(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if trips, _, commands := hook.take(); trips != 1 {
		t.Fatalf("statuses of %d sensors took %d round trips: %d commands", len(ids), trips, len(commands))
	}
	if len(got) != len(ids) {
		t.Fatalf("%d statuses for %d ids", len(got), len(ids))
	}
	if st := got["online"]; !st.Deadline.Equal(at(5000)) || !st.Missed.IsZero() {
		t.Errorf("online = %+v", st)
	}
	if st := got["never"]; !st.Deadline.IsZero() || !st.Missed.IsZero() {
		t.Errorf("never = %+v", st)
	}
	if st := got["s00007"]; !st.Deadline.IsZero() || !st.Missed.Equal(at(7)) {
		t.Errorf("lost s00007 = %+v", st)
	}
	if st := got["s00700"]; !st.Missed.IsZero() {
		t.Errorf("s00700 was never tracked: %+v", st)
	}
}
