package storage_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// record folds outcomes of the client's webhook (ok or not, one second apart
// from at on) into its health with a failing threshold of 5, and returns how
// many notices that recorded.
func record(t *testing.T, f *outboxFixture, clientID string, at time.Time, oks ...bool) int {
	t.Helper()
	var outcomes []storage.WebhookOutcome
	for i, ok := range oks {
		outcomes = append(outcomes, storage.WebhookOutcome{ClientID: clientID, OK: ok, At: at.Add(time.Duration(i) * time.Second)})
	}
	n, err := f.pg.RecordWebhookHealth(f.ctx, outcomes, 5)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// publish publishes every pending notice.
func publish(t *testing.T, f *outboxFixture) int {
	t.Helper()
	n, err := f.pg.PublishEndpointNotices(f.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// feedTypes lists the types on the client's feed, checking that seqs run 1, 2, 3….
func feedTypes(t *testing.T, f *outboxFixture, clientID string) []string {
	t.Helper()
	events, err := f.pg.ListClientEvents(f.ctx, clientID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for i, e := range events {
		if e.Seq != int64(i+1) {
			t.Fatalf("feed %+v: seq %d at %d", events, e.Seq, i)
		}
		types = append(types, string(e.Type))
		if strings.HasPrefix(string(e.Type), "endpoint_") && (e.Detail == "" || e.Sensor.ID != "") {
			t.Errorf("feed notice %+v: want a detail and no sensor", e)
		}
	}
	return types
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A failing endpoint gives its client one endpoint_failing per failing streak
// (at the 5th consecutive failure), then endpoint_disabled, and
// endpoint_recovered after enable and a success: each on the feed with its
// seq, in every member's inbox, and mailed once; no webhook delivery for any.
func TestEndpointNoticesOnePerStreak(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "noticeDoor")
	c := f.Client(t, registry.Client{Name: "notified", Email: "owner@example.com"}, "noticeDoor")
	alice := f.Member(t, c.ID, "alice", registry.Backfill{})
	bob := f.Member(t, c.ID, "bob", registry.Backfill{})
	now := time.Now()
	start := now.Add(-2 * time.Hour)

	if n := record(t, f, c.ID, start, false, false, false, true); n != 0 {
		t.Fatalf("3 failures then a success gave %d notices", n)
	}
	if n := record(t, f, c.ID, start.Add(time.Minute), false, false, false, false); n != 0 {
		t.Fatalf("4 failures gave %d notices", n)
	}
	if n := record(t, f, c.ID, start.Add(2*time.Minute), false); n != 1 {
		t.Fatalf("the 5th consecutive failure gave %d notices, want 1", n)
	}
	if n := record(t, f, c.ID, start.Add(3*time.Minute), false, false, false, false, false, false); n != 0 {
		t.Fatalf("more failures of the same streak gave %d notices", n)
	}
	if n := publish(t, f); n != 1 {
		t.Fatalf("published %d, want 1", n)
	}
	if n := publish(t, f); n != 0 {
		t.Fatalf("published %d again", n)
	}
	if got := feedTypes(t, f, c.ID); !equalStrings(got, []string{"endpoint_failing"}) {
		t.Fatalf("feed %v, want endpoint_failing", got)
	}

	sweep := disable(t, f, now, time.Hour, 5)
	if len(sweep.Disabled) != 1 {
		t.Fatalf("sweep %+v, want the endpoint disabled", sweep)
	}
	// A straggler's success while disabled recovers nothing.
	if n := record(t, f, c.ID, now.Add(-time.Minute), true); n != 0 {
		t.Fatalf("a success while disabled gave %d notices", n)
	}
	if _, err := f.pg.EnableEndpoint(f.ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if n := record(t, f, c.ID, now, true); n != 1 {
		t.Fatalf("a success after enable gave %d notices, want 1 (recovered)", n)
	}
	if n := record(t, f, c.ID, now.Add(time.Second), true); n != 0 {
		t.Fatalf("a second success gave %d notices", n)
	}
	publish(t, f)
	want := []string{"endpoint_failing", "endpoint_disabled", "endpoint_recovered"}
	if got := feedTypes(t, f, c.ID); !equalStrings(got, want) {
		t.Fatalf("feed %v, want %v", got, want)
	}
	for _, m := range []registry.Member{alice, bob} {
		var types []string
		for _, msg := range f.inbox(t, m.ID) {
			types = append(types, msg.Type)
			if msg.Subject == "" || msg.SensorID != "" {
				t.Errorf("%s's notice %+v: want a subject and no sensor", m.Name, msg)
			}
			if sev := msg.Severity; (msg.Type == "endpoint_recovered") != (sev == "info") {
				t.Errorf("%s's %s has severity %s", m.Name, msg.Type, sev)
			}
		}
		if !equalStrings(types, want) {
			t.Errorf("%s's inbox %v, want %v", m.Name, types, want)
		}
	}
	for _, d := range f.deliveries(t, c.ID) {
		t.Errorf("a notice made a delivery: %+v", d)
	}

	var mailed []string
	for range 2 {
		if _, err := f.pg.MailEndpointNotices(f.ctx, 10, func(_ context.Context, n storage.EndpointNotice) storage.NoticeResult {
			mailed = append(mailed, n.Type)
			return storage.NoticeResult{Done: true}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if !equalStrings(mailed, want) {
		t.Errorf("mailed %v, want %v once each", mailed, want)
	}

	// A new streak after recovering is told again.
	if n := record(t, f, c.ID, now.Add(time.Minute), false, false, false, false, false); n != 1 {
		t.Fatalf("a new streak of 5 gave %d notices, want 1", n)
	}
}

// Several retriers recording failures of one endpoint at once give it one
// endpoint_failing.
func TestEndpointFailingOnceAcrossConcurrentBatches(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "busyDoor")
	c := f.Client(t, registry.Client{Name: "busy"}, "busyDoor")
	at := time.Now().Add(-time.Hour)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcomes := []storage.WebhookOutcome{}
			for i := range 3 {
				outcomes = append(outcomes, storage.WebhookOutcome{ClientID: c.ID, At: at.Add(time.Duration(w*3+i) * time.Millisecond)})
			}
			n, err := f.pg.RecordWebhookHealth(f.ctx, outcomes, 5)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != 1 {
		t.Fatalf("8 concurrent batches of 3 failures gave %d notices, want 1", total)
	}
	got, err := f.reg.GetClient(f.ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.WebhookFailures != 24 {
		t.Errorf("failures = %d, want 24", got.WebhookFailures)
	}
}

// A connection_restored that knows its loss keeps lost_since: its deliveries
// carry it (for the webhook, email and push), the feed gives lost_since and
// silent_seconds, and each member's inbox message says "back after 2 h 14 min".
func TestRestoredCarriesTheOutage(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "backDoor")
	c := f.Client(t, registry.Client{Name: "outage", Email: "o@example.com"}, "backDoor")
	m := f.Member(t, c.ID, "alice", registry.Backfill{})
	at := time.Date(2026, 11, 22, 12, 14, 0, 0, time.UTC)
	since := at.Add(-(2*time.Hour + 14*time.Minute))
	one := 1
	f.create(t, storage.NotificationInput{EventID: "r1", Type: "connection_restored", SensorID: "backDoor", Data: &one,
		At: at, LostSince: &since}, stateChanged("s1", "backDoor", 0, at.Add(time.Second)))

	for _, d := range f.deliveries(t, c.ID) {
		switch {
		case d.EventType == "connection_restored" && (d.LostSince == nil || !d.LostSince.Equal(since)):
			t.Errorf("%s delivery of the restore: lost_since %v, want %v", d.Channel, d.LostSince, since)
		case d.EventType != "connection_restored" && d.LostSince != nil:
			t.Errorf("%s delivery of a %s carries lost_since", d.Channel, d.EventType)
		}
	}
	events, err := f.pg.ListClientEvents(f.ctx, c.ID, 0, 10)
	if err != nil || len(events) != 2 {
		t.Fatalf("feed %+v, %v", events, err)
	}
	if e := events[0]; e.LostSince == nil || !e.LostSince.Equal(since) || e.SilentSeconds != 8040 {
		t.Errorf("feed's restore %+v: want lost_since %v, silent_seconds 8040", e, since)
	}
	if e := events[1]; e.LostSince != nil || e.SilentSeconds != 0 {
		t.Errorf("feed's state change %+v carries an outage", e)
	}
	msgs := f.inbox(t, m.ID)
	if len(msgs) != 2 || msgs[0].Subject != "back after 2 h 14 min" ||
		string(msgs[0].Message) != `{"lost_since": "2026-11-22T10:00:00Z", "silent_seconds": 8040}` || msgs[1].Subject != "" {
		t.Errorf("inbox %+v: want the restore's subject and message", msgs)
	}
}
