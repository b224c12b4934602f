package fanout_test

import (
	"context"
	"crypto/sha256"
	"slices"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// The fan-out puts one message per event in the inbox of each member of the
// clients it notifies, in event order with seq 1..n, and a replayed event adds
// none.
func TestFanoutFillsMembersInboxesOncePerEvent(t *testing.T) {
	t.Parallel()
	scfg := streamtest.Config(t, 3)
	pg, ctx := storagetest.New(t).Postgres, context.Background()
	members := doorWatchedBy(t, pg, "ann", "bob")
	inbox := func(member string) []inbox.Message {
		_, ms, err := inbox.NewPostgresStore(pg).ListInbox(ctx, inbox.Query{MemberID: member, IncludeSeen: true, Sort: inbox.SortTimestamp, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}

	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var events []event.Event
	for i, data := range []int{1, 0, 1, 0} {
		d := data
		events = append(events, event.Event{ID: event.StateChangedID("door", [16]byte{}, 0, int64(i)), Type: event.StateChanged,
			SensorID: "door", Data: &d, At: t0.Add(time.Duration(i) * time.Second)})
	}
	producer := streamtest.Client(t, scfg)
	for _, e := range events {
		produce(t, producer, scfg.EventsTopic(), eventRecord(t, e))
	}
	reg, stop := runFanout(t, fanout.Config{Stream: scfg, RetryBackoff: 10 * time.Millisecond}, fanout.NewPostgresStore(pg))
	waitFor(t, "the inbox messages counted", func() bool {
		return counterValue(t, reg, "lockstream_inbox_messages_created_total", nil) >= 8
	})
	for _, m := range members {
		got := inbox(m)
		var seqs []int64
		var data []int
		for _, msg := range got {
			seqs = append(seqs, msg.Seq)
			data = append(data, *msg.Data)
		}
		if !slices.Equal(seqs, []int64{1, 2, 3, 4}) || !slices.Equal(data, []int{1, 0, 1, 0}) {
			t.Fatalf("inbox of %s: seqs %v data %v", m, seqs, data)
		}
	}
	stop()

	// A replay through a new fan-out process adds nothing.
	produce(t, producer, scfg.EventsTopic(), eventRecord(t, events[1]), eventRecord(t, events[3]))
	reg2, _ := runFanout(t, fanout.Config{Stream: scfg, RetryBackoff: 10 * time.Millisecond, Group: "replay"}, fanout.NewPostgresStore(pg))
	waitFor(t, "the replay consumed", func() bool {
		return counterValue(t, reg2, "lockstream_fanout_events_total", nil) >= 6
	})
	if got := counterValue(t, reg2, "lockstream_inbox_messages_created_total", nil); got != 0 {
		t.Fatalf("a replay created %v inbox messages", got)
	}
	if got := inbox(members[0]); len(got) != 4 {
		t.Fatalf("after the replay: %d messages", len(got))
	}
}

// doorWatchedBy makes sensor "door", linked to a client with the named
// members, and returns the members' ids.
func doorWatchedBy(t *testing.T, pg *storage.Postgres, names ...string) []string {
	t.Helper()
	ctx := context.Background()
	if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: "door", Address: "1 Main St"}); err != nil {
		t.Fatal(err)
	}
	client, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "c", WebhookURL: "https://example.com/h", Secret: "whsec_c2VjcmV0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := registry.New(pg).LinkSensor(ctx, client.ID, "door"); err != nil {
		t.Fatal(err)
	}
	var members []string
	for _, name := range names {
		hash := sha256.Sum256([]byte("lsm_" + name))
		m, _, err := registry.New(pg).CreateMember(ctx, registry.Member{ClientID: client.ID, Name: name, Timezone: "UTC",
			Preferences: registry.DefaultMemberPreferences()}, hash[:], registry.Backfill{})
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, m.ID)
	}
	return members
}

// The fan-out writes the members' own copies of a shared inbox message
// InboxCopyDelay after its commit, off the writers' path, and not before: with
// a delay of an hour the message is announced and readable (a read writes the
// reader's copy first) while no copy is written; with 10 ms the copy loop
// writes them all.
func TestFanoutCopiesSharedMessagesAfterTheDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		delay      time.Duration
		wantCopies bool
	}{{"an hour", time.Hour, false}, {"10ms", 10 * time.Millisecond, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			scfg := streamtest.Config(t, 3)
			pg, ctx := storagetest.New(t).Postgres, context.Background()
			members := doorWatchedBy(t, pg, "ann", "bob", "cat")
			d := 1
			produce(t, streamtest.Client(t, scfg), scfg.EventsTopic(), eventRecord(t, event.Event{
				ID: event.StateChangedID("door", [16]byte{}, 0, 1), Type: event.StateChanged, SensorID: "door", Data: &d,
				At: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}))
			reg, _ := runFanout(t, fanout.Config{Stream: scfg, RetryBackoff: 10 * time.Millisecond, InboxCopyDelay: tc.delay},
				fanout.NewPostgresStore(pg))
			waitFor(t, "the event written", func() bool {
				return counterValue(t, reg, "lockstream_fanout_events_total", nil) >= 1
			})
			copies := func() (n int) {
				if err := pg.Pool().QueryRow(ctx, `SELECT count(*) FROM inbox_messages`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			if !tc.wantCopies {
				if n := copies(); n != 0 {
					t.Fatalf("%d copies written before the delay", n)
				}
				if got := counterValue(t, reg, "lockstream_fanout_inbox_copies_total", nil); got != 0 {
					t.Fatalf("lockstream_fanout_inbox_copies_total = %v before the delay", got)
				}
				_, msgs, err := inbox.NewPostgresStore(pg).ListInbox(ctx, inbox.Query{MemberID: members[0], IncludeSeen: true,
					Sort: inbox.SortTimestamp, Limit: 10})
				if err != nil || len(msgs) != 1 || msgs[0].Seq != 1 {
					t.Fatalf("ann's inbox before the copies: %+v, %v", msgs, err)
				}
				if n := copies(); n != 1 {
					t.Fatalf("after ann's read: %d copies, want hers alone", n)
				}
				return
			}
			waitFor(t, "the members' copies written", func() bool {
				return counterValue(t, reg, "lockstream_fanout_inbox_copies_total", nil) >= 3
			})
			var shared int
			if err := pg.Pool().QueryRow(ctx, `SELECT count(*) FROM inbox_shared`).Scan(&shared); err != nil {
				t.Fatal(err)
			}
			if n := copies(); n != 3 || shared != 0 {
				t.Fatalf("%d copies and %d shared rows left, want 3 and 0", n, shared)
			}
		})
	}
}

// The fan-out makes the inbox_messages partitions of its clock's month and the
// three after it before it consumes: by the time its first batch is counted,
// they exist, though neither the migrations nor a maintain made them.
func TestFanoutMakesInboxPartitionsBeforeConsuming(t *testing.T) {
	t.Parallel()
	scfg := streamtest.Config(t, 1)
	pg, ctx := storagetest.New(t).Postgres, context.Background()
	want := []string{"inbox_messages_209011", "inbox_messages_209012", "inbox_messages_209101", "inbox_messages_209102"}
	partitions := func() []string {
		var names []string
		if err := pg.Pool().QueryRow(ctx, `
			SELECT coalesce(array_agg(c.relname::text ORDER BY c.relname), '{}')
			FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = 'inbox_messages'::regclass AND c.relname = ANY($1)`, want).Scan(&names); err != nil {
			t.Fatal(err)
		}
		return names
	}
	if got := partitions(); len(got) != 0 {
		t.Fatalf("partitions %v exist before the fan-out ran", got)
	}

	at := time.Date(2090, 11, 30, 23, 30, 0, 0, time.UTC)
	lost := event.Event{ID: event.ConnectionLostID("nobody", at), Type: event.ConnectionLost, SensorID: "nobody", At: at}
	produce(t, streamtest.Client(t, scfg), scfg.EventsTopic(), eventRecord(t, lost))
	reg, _ := runFanout(t, fanout.Config{Stream: scfg, RetryBackoff: 10 * time.Millisecond, Now: func() time.Time { return at }},
		fanout.NewPostgresStore(pg))
	waitFor(t, "the event consumed", func() bool {
		return counterValue(t, reg, "lockstream_fanout_events_total", nil) >= 1
	})
	if got := partitions(); !slices.Equal(got, want) {
		t.Fatalf("inbox partitions %v after the first batch, want %v", got, want)
	}
}
