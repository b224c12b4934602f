package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// liveTimeout is the heartbeat timeout of the live analytics test.
const liveTimeout = 2 * time.Second

// TestProcessAnalyticsLive runs `lockstream all` and sends readings over Kafka
// with known timing: door u1 unlocks, then locks about 3 s later; door l1
// reports once, goes silent past the heartbeat timeout, and reports again
// about 6 s later. The summary the API answers — through the consumer, the
// heartbeat, the history writer and the rollups' views — gives time unlocked
// and time lost within a second of the truth (ClickHouse keeps whole
// seconds): u1 unlocked from its first reading to its second (the readings'
// times on the broker), l1 lost from its connection_lost to its
// connection_restored (their times on the events topic).
func TestProcessAnalyticsLive(t *testing.T) {
	t.Parallel()
	kafka := privateKafka(t)
	stores := storagetest.New(t)
	addr := freeAddr(t)
	const token = "analytics-live-admin"
	h := newHarness(t, append(storeSettings(kafka, stores.PostgresURL, stores.ClickHouseURL, stores.RedisURL, stores.RedisPrefix),
		"LOCKSTREAM_HTTP_ADDR="+addr, "LOCKSTREAM_ADMIN_TOKEN="+token, "LOCKSTREAM_DATA_DIR="+t.TempDir(),
		"LOCKSTREAM_HEARTBEAT_TIMEOUT="+liveTimeout.String(), "LOCKSTREAM_HEARTBEAT_SWEEP_INTERVAL=200ms",
		"LOCKSTREAM_METRICS_ADDR=")...)
	ctx, cancel := context.WithTimeout(context.Background(), processWait)
	defer cancel()
	for _, id := range []string{"u1", "l1"} {
		if _, err := stores.Registry.CreateSensor(ctx, registry.Sensor{ID: id, Address: "live " + id}); err != nil {
			t.Fatal(err)
		}
	}
	all := h.start("all", "all")
	api := "http://" + addr
	h.waitFor("the API to be ready", func() (bool, string) {
		resp, err := http.Get(api + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, "readyz: " + resp.Status
	})
	// At its first start the heartbeat rebuilds its sets, giving every sensor
	// a full timeout from then: the scenario starts after that.
	h.waitFor("the heartbeat's sets rebuilt", func() (bool, string) {
		return strings.Contains(all.out.String(), "heartbeat sets rebuilt"), "not yet"
	})

	client := streamtest.Client(t, kafka)
	send := func(id string, data int) pos {
		t.Helper()
		r := &kgo.Record{Topic: kafka.ReadingsTopic(), Key: []byte(id), Value: fmt.Appendf(nil, `{"sensor_id":%q,"data":%d}`, id, data)}
		if err := client.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return pos{r.Partition, r.Offset}
	}
	// pass lets the scenario's time go by: the doors' timing, not a wait for
	// the system.
	pass := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	unlockedAt := send("u1", 0)
	l1SeenAt := send("l1", 1)
	pass(3 * time.Second)
	lockedAt := send("u1", 1)
	pass(3 * time.Second)
	backAt := send("l1", 1)
	// The truth is the readings' times as the broker keeps them, which every
	// daemon reads.
	times := readingTimes(t, kafka)
	unlocked, l1Seen, locked, back := times[unlockedAt], times[l1SeenAt], times[lockedAt], times[backAt]
	from, to := unlocked.Add(-time.Minute).Truncate(time.Second), back.Add(time.Second).Truncate(time.Second)

	summary := func(id string) map[string]any {
		q := url.Values{"scope": {"sensor:" + id}, "from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}, "bucket": {"1h"}}
		req, _ := http.NewRequestWithContext(ctx, "GET", api+"/v1/analytics/summary?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct{ Total map[string]any }
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("summary of %s: %d, %v", id, resp.StatusCode, err)
		}
		return body.Total
	}
	var u1, l1 map[string]any
	h.waitFor("the history of both doors in ClickHouse", func() (bool, string) {
		u1, l1 = summary("u1"), summary("l1")
		return u1["changes"] == 2.0 && l1["restores"] == 1.0, fmt.Sprintf("u1 %v, l1 %v", u1, l1)
	})
	within := func(what string, got any, truth time.Duration) {
		t.Helper()
		g, _ := got.(float64)
		if diff := time.Duration(g*float64(time.Second)) - truth; diff < -time.Second || diff > time.Second {
			t.Errorf("%s = %v s, truth %v: off by %v", what, got, truth, diff)
		}
	}
	within("u1's unlocked_seconds", u1["unlocked_seconds"], locked.Sub(unlocked))
	// l1 was lost from its connection_lost (its deadline: the last reading
	// plus the timeout, rounded up to the second) to its connection_restored,
	// as the events topic says.
	var lostAt, restoredAt time.Time
	for _, r := range streamtest.ReadAll(t, kafka, kafka.EventsTopic()) {
		e, err := event.Decode(r.Value)
		if err != nil || e.SensorID != "l1" {
			continue
		}
		switch {
		case e.Type == event.ConnectionLost && lostAt.IsZero():
			lostAt = e.At
		case e.Type == event.ConnectionRestored && restoredAt.IsZero():
			restoredAt = e.At
		}
	}
	if lostAt.Before(l1Seen.Add(liveTimeout)) || restoredAt.Before(back) {
		t.Fatalf("l1 seen %v, lost at %v, back %v, restored at %v", l1Seen, lostAt, back, restoredAt)
	}
	within("l1's lost_seconds", l1["lost_seconds"], restoredAt.Sub(lostAt))
	within("l1's mean_restore_seconds", l1["mean_restore_seconds"], restoredAt.Sub(lostAt))
	t.Logf("u1 unlocked %v s (truth %v), l1 lost %v s (truth %v)", u1["unlocked_seconds"], locked.Sub(unlocked),
		l1["lost_seconds"], restoredAt.Sub(lostAt))
}
