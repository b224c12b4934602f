package inbox_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/webapi/live"
)

// fixture is a private database with the registry, the fan-out's writes
// (storage) and the inbox's store over one pool.
type fixture struct {
	*storagetest.Fleet
	pg  *storage.Postgres
	reg *registry.Store
	in  *inbox.PostgresStore
	ctx context.Context
}

func newFixture(t *testing.T, sensors ...string) *fixture {
	t.Helper()
	fleet := storagetest.NewFleet(t, sensors...)
	return &fixture{Fleet: fleet, pg: fleet.Postgres, reg: fleet.Registry, in: inbox.NewPostgresStore(fleet.Postgres),
		ctx: fleet.Ctx}
}

// create runs the fan-out's write of events.
func (f *fixture) create(t *testing.T, events ...storage.NotificationInput) fanout.NotificationsCreated {
	t.Helper()
	created, err := fanout.NewPostgresStore(f.pg).CreateNotifications(f.ctx, events)
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// inbox returns every message of the member, seen and unseen, in seq order.
func (f *fixture) inbox(t *testing.T, memberID string) []inbox.Message {
	t.Helper()
	_, ms, err := f.in.ListInbox(f.ctx, inbox.Query{MemberID: memberID, IncludeSeen: true,
		Sort: inbox.SortTimestamp, Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ms, func(a, b inbox.Message) int { return int(a.Seq - b.Seq) })
	return ms
}

func TestInboxFanoutOneMessagePerMemberInOrderIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1", "door2")
	c := f.Client(t, registry.Client{Name: "acme"}, "door1")
	lonely := f.Client(t, registry.Client{Name: "no members"}, "door1")
	a := f.Member(t, c.ID, "alice", registry.Backfill{})
	b := f.Member(t, c.ID, "bob", registry.Backfill{})
	_ = lonely

	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	batch := []storage.NotificationInput{
		stateChanged("e1", "door1", 1, at),
		stateChanged("e2", "door2", 1, at), // no member's client watches door2
		stateChanged("e3", "door1", 0, at.Add(time.Second)),
		{EventID: "e4", Type: "connection_lost", SensorID: "door1", Data: new(0), At: at.Add(2 * time.Second)},
	}
	created := f.create(t, batch...)
	if created.InboxMessages != 6 {
		t.Fatalf("InboxMessages = %d, want 6 (3 events × 2 members)", created.InboxMessages)
	}
	for _, m := range []registry.Member{a, b} {
		got := f.inbox(t, m.ID)
		if len(got) != 3 {
			t.Fatalf("%s has %d messages, want 3: %+v", m.Name, len(got), got)
		}
		for i, msg := range got {
			if msg.Seq != int64(i+1) || msg.Cause != inbox.CauseEvent || msg.SeenAt != nil || msg.ClientID != c.ID {
				t.Errorf("%s message %d: %+v", m.Name, i, msg)
			}
		}
		if got[0].Type != "state_changed" || *got[0].Data != 1 || got[1].Data == nil || *got[1].Data != 0 ||
			got[2].Type != "connection_lost" || got[2].Severity != "critical" || got[0].Severity != "info" ||
			got[0].SensorAddress != "addr of door1" {
			t.Errorf("%s messages out of order or wrong: %+v", m.Name, got)
		}
	}

	// A replay, whole or partial, adds nothing.
	again := f.create(t, batch[2], batch[0], stateChanged("e5", "door1", 1, at.Add(3*time.Second)))
	if again.InboxMessages != 2 {
		t.Fatalf("replay with one new event: InboxMessages = %d, want 2", again.InboxMessages)
	}
	if got := f.inbox(t, a.ID); len(got) != 4 || got[3].Seq != 4 || *got[3].Data != 1 {
		t.Fatalf("after the replay alice has %+v", got)
	}
}

// Several fan-outs writing for the same members at once, free-form notifications
// among them, leave every member with seqs 1..n: no gap, no duplicate, and no
// deadlock (the counters are locked in member-id order).
func TestInboxConcurrentWritersNoGapNoDuplicate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1", "door2")
	c1 := f.Client(t, registry.Client{Name: "one"}, "door1", "door2")
	c2 := f.Client(t, registry.Client{Name: "two"}, "door2")
	var members []registry.Member
	for i := range 12 {
		c := c1
		if i%3 == 0 {
			c = c2
		}
		members = append(members, f.Member(t, c.ID, fmt.Sprint("m", i), registry.Backfill{}))
	}
	var notices sync.Map   // member id → highest seq heard on the channel
	var announced sync.Map // "member/seq" → the id of the message announced whole
	listening := make(chan struct{})
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	go func() {
		_ = live.NewPostgresStore(f.pg).ListenInbox(ctx, func() { close(listening) }, func(news inbox.News) {
			ns := news.Pointers
			for _, m := range news.Messages {
				if m.ID == "" || m.ClientID == "" || m.Type == "" {
					t.Errorf("a message announced without its fields: %+v", m)
				}
				ns = append(ns, inbox.Notice{MemberID: m.MemberID, Seq: m.Seq})
				if old, dup := announced.LoadOrStore(fmt.Sprint(m.MemberID, "/", m.Seq), m.ID); dup && old != m.ID {
					t.Errorf("member %s seq %d announced as %s and as %s", m.MemberID, m.Seq, old, m.ID)
				}
			}
			for _, n := range ns {
				if old, ok := notices.Load(n.MemberID); !ok || old.(int64) < n.Seq {
					notices.Store(n.MemberID, n.Seq)
				}
			}
		})
	}()
	<-listening

	const writers, batches, perBatch = 6, 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for w := range writers {
		wg.Go(func() {
			for b := range batches {
				var events []storage.NotificationInput
				for e := range perBatch {
					sensor := []string{"door1", "door2"}[(w+b+e)%2]
					events = append(events, stateChanged(fmt.Sprintf("w%d-b%d-e%d", w, b, e), sensor, e%2,
						at.Add(time.Duration(b*perBatch+e)*time.Millisecond)))
				}
				if _, err := fanout.NewPostgresStore(f.pg).CreateNotifications(f.ctx, events); err != nil {
					errs <- err
					return
				}
				if w == 0 {
					if _, err := f.in.RecordNotification(f.ctx, inbox.FreeFormNotification{ClientID: c2.ID,
						Type: "maintenance", Subject: "tonight"}); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, m := range members {
		got := f.inbox(t, m.ID)
		for i, msg := range got {
			if msg.Seq != int64(i+1) {
				t.Fatalf("member %s: message %d has seq %d; seqs %v", m.Name, i, msg.Seq, seqs(got))
			}
		}
		// What the streams were told is what the inbox holds (shared messages'
		// seqs are fixed before their copies are written).
		announced.Range(func(k, v any) bool {
			member, seq, _ := strings.Cut(k.(string), "/")
			var n int
			_, _ = fmt.Sscan(seq, &n)
			if member == m.ID && (n < 1 || n > len(got) || got[n-1].ID != v.(string)) {
				t.Errorf("member %s: seq %s announced as message %s, stored %v", m.Name, seq, v, got)
			}
			return true
		})
		state, err := f.in.GetInboxState(f.ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if state.LastSeq != int64(len(got)) || state.FirstSeq != 1 {
			t.Fatalf("member %s: state %+v with %d messages", m.Name, state, len(got))
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			heard, _ := notices.Load(m.ID)
			if heard != nil && heard.(int64) == state.LastSeq {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("member %s: heard %v on %s, want %d", m.Name, heard, inbox.Channel, state.LastSeq)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// A read of an inbox that waits for the copier's lock on the member, while a
// shared message newer than the copier saw commits, still sees that message:
// the read decides what it writes from the member's row as the copier left it
// and every shared message the read's snapshot holds, not from the one shared
// row it matched before it waited (Postgres rechecks only that row after a
// wait, and the copier's cseq had passed it). Seen in CI as a stream showing
// message 5 and the inbox read right after it listing 1–4.
func TestInboxReadWaitingForTheCopierSeesNewerSharedMessages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	c := f.Client(t, registry.Client{Name: "acme"}, "door1")
	alice := f.Member(t, c.ID, "alice", registry.Backfill{})
	f.Member(t, c.ID, "bob", registry.Backfill{})
	fan := fanout.NewPostgresStore(f.pg)
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	write := func(id string, data int, after time.Duration) {
		t.Helper()
		// Claiming leaves the members' copies to the caller, as the fan-out does.
		if _, err := fan.CreateNotificationsClaiming(f.ctx, []storage.NotificationInput{
			stateChanged(id, "door1", data, at.Add(after))}, fanout.Claim{}); err != nil {
			t.Fatal(err)
		}
	}
	write("e1", 1, 0)
	write("e2", 0, time.Second)

	// The copier writes the copies of 1 and 2 and holds the members' rows.
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	copier, err := f.pg.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = copier.Rollback(context.WithoutCancel(ctx)) }()
	var copierPID int
	if err := copier.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&copierPID); err != nil {
		t.Fatal(err)
	}
	if n, err := inbox.MaterializeShared(ctx, copier); err != nil || n != 4 {
		t.Fatalf("the copier wrote %d copies (%v), want 4", n, err)
	}
	// Meanwhile a third shared message commits, and alice's inbox is read.
	write("e3", 1, 2*time.Second)
	type listed struct {
		ms  []inbox.Message
		err error
	}
	read := make(chan listed, 1)
	go func() {
		_, ms, err := f.in.ListInbox(ctx, inbox.Query{MemberID: alice.ID, IncludeSeen: true,
			Sort: inbox.SortTimestamp, Limit: 100})
		read <- listed{ms, err}
	}()
	// The read waits for the copier's lock (Postgres says so), then the copier
	// commits.
	storagetest.WaitBlockedBy(ctx, t, f.pg.Pool().Config().ConnConfig, copierPID,
		"the read waits for the copier", func() bool { return len(read) > 0 })
	if err := copier.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-read
	if got.err != nil {
		t.Fatal(got.err)
	}
	slices.SortFunc(got.ms, func(a, b inbox.Message) int { return int(a.Seq - b.Seq) })
	if !slices.Equal(seqs(got.ms), []int64{1, 2, 3}) {
		t.Fatalf("alice's inbox read after the copier: seqs %v, want [1 2 3]", seqs(got.ms))
	}
}

func seqs(ms []inbox.Message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}

func TestInboxListFilterSortCountMark(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "bdoor", "adoor")
	c := f.Client(t, registry.Client{Name: "acme"}, "bdoor", "adoor")
	m := f.Member(t, c.ID, "alice", registry.Backfill{})
	other := f.Member(t, c.ID, "bob", registry.Backfill{})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	f.create(t,
		stateChanged("e1", "bdoor", 1, at),
		stateChanged("e2", "adoor", 1, at.Add(time.Minute)),
		storage.NotificationInput{EventID: "e3", Type: "connection_lost", SensorID: "bdoor", Data: new(1), At: at.Add(2 * time.Minute)},
	)
	if _, err := f.in.RecordNotification(f.ctx, inbox.FreeFormNotification{MemberID: m.ID, Type: "billing",
		Subject: "invoice", Message: []byte(`{"amount":3}`)}); err != nil {
		t.Fatal(err)
	}
	list := func(q inbox.Query) (int, []int64) {
		t.Helper()
		q.MemberID = m.ID
		if q.Sort == "" {
			q.Sort = inbox.SortTimestamp
		}
		if q.Limit == 0 {
			q.Limit = 1000
		}
		total, ms, err := f.in.ListInbox(f.ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return total, seqs(ms)
	}
	check := func(name string, q inbox.Query, wantTotal int, want ...int64) {
		t.Helper()
		total, got := list(q)
		if total != wantTotal || !slices.Equal(got, want) {
			t.Errorf("%s: total %d seqs %v, want %d %v", name, total, got, wantTotal, want)
		}
	}
	check("newest first", inbox.Query{Descending: true}, 4, 4, 3, 2, 1)
	check("oldest first, page", inbox.Query{Limit: 2, Offset: 1}, 4, 2, 3)
	check("by type", inbox.Query{Sort: inbox.SortType}, 4, 4, 3, 1, 2)
	check("by sensor, desc", inbox.Query{Sort: inbox.SortSensor, Descending: true}, 4, 4, 3, 1, 2)
	check("one type", inbox.Query{Type: "state_changed"}, 2, 1, 2)
	check("count only", inbox.Query{CountOnly: true, Type: "billing"}, 1)

	mark := func(action inbox.Action, all bool, ids ...string) int {
		t.Helper()
		n, err := f.in.MarkInbox(f.ctx, m.ID, action, ids, all)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	byseq := map[int64]string{}
	for _, msg := range f.inbox(t, m.ID) {
		byseq[msg.Seq] = msg.ID
	}
	bobs := f.inbox(t, other.ID)
	if n := mark(inbox.ActionSeen, false, byseq[1], byseq[2], bobs[0].ID, "not-an-id"); n != 2 {
		t.Fatalf("seen marked %d, want 2 (bob's message and garbage skipped)", n)
	}
	check("unseen only", inbox.Query{}, 2, 3, 4)
	check("seen included", inbox.Query{IncludeSeen: true}, 4, 1, 2, 3, 4)
	if got := f.inbox(t, other.ID); got[0].SeenAt != nil {
		t.Fatal("bob's message became seen through alice")
	}
	mark(inbox.ActionUnseen, false, byseq[2])
	check("after unseen", inbox.Query{}, 3, 2, 3, 4)
	mark(inbox.ActionDelete, false, byseq[3])
	check("after delete", inbox.Query{IncludeSeen: true}, 3, 1, 2, 4)
	if _, err := f.in.GetInboxMessage(f.ctx, m.ID, byseq[3]); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("deleted message: %v", err)
	}
	if _, err := f.in.GetInboxMessage(f.ctx, other.ID, byseq[1]); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("alice's message as bob: %v", err)
	}
	msg, err := f.in.GetInboxMessage(f.ctx, m.ID, byseq[4])
	if err != nil || msg.Subject != "invoice" || string(msg.Message) != `{"amount": 3}` || msg.SensorID != "" {
		t.Fatalf("free-form message: %+v %v", msg, err)
	}
	if n := mark(inbox.ActionSeen, true); n != 3 {
		t.Fatalf("all_notifications seen marked %d, want 3", n)
	}
	check("all seen", inbox.Query{}, 0)
	mark(inbox.ActionDelete, true)
	check("all deleted", inbox.Query{IncludeSeen: true}, 0)
	if got := f.inbox(t, other.ID); len(got) != 3 {
		t.Fatalf("bob lost messages: %d", len(got))
	}
}

func TestInboxBackfillOfNewMember(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	c := f.Client(t, registry.Client{Name: "acme"}, "door1")
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for i := range 5 {
		f.create(t, stateChanged(fmt.Sprint("e", i), "door1", i%2, at.Add(time.Duration(i)*time.Second)))
	}
	m := f.Member(t, c.ID, "late", registry.Backfill{Window: time.Hour, Max: 3})
	got := f.inbox(t, m.ID)
	if len(got) != 3 {
		t.Fatalf("backfilled %d messages, want 3", len(got))
	}
	for i, msg := range got {
		if msg.Seq != int64(i+1) || msg.Cause != inbox.CauseNewMember || msg.SeenAt != nil || !msg.At.Equal(at.Add(time.Duration(i+2)*time.Second)) {
			t.Errorf("backfilled message %d: %+v", i, msg)
		}
	}
	none := f.Member(t, c.ID, "none", registry.Backfill{Window: time.Hour})
	if got := f.inbox(t, none.ID); len(got) != 0 {
		t.Fatalf("backfill with no max gave %d messages", len(got))
	}
	// The next event follows the backfill.
	f.create(t, stateChanged("e9", "door1", 1, at.Add(time.Minute)))
	if got := f.inbox(t, m.ID); len(got) != 4 || got[3].Seq != 4 || got[3].Cause != inbox.CauseEvent {
		t.Fatalf("after the backfill: %+v", got)
	}
	// Of the newest max, only those written within the window: e0-e3 written
	// two hours ago, so a window of an hour leaves e4 and e9.
	if _, err := f.pg.Pool().Exec(f.ctx, `UPDATE notifications SET created_at = now() - interval '2 hours'
		WHERE client_id = $1 AND event_id IN ('e0', 'e1', 'e2', 'e3')`, c.ID); err != nil {
		t.Fatal(err)
	}
	recent := f.Member(t, c.ID, "recent", registry.Backfill{Window: time.Hour, Max: 3})
	got = f.inbox(t, recent.ID)
	if len(got) != 2 || !got[0].At.Equal(at.Add(4*time.Second)) || !got[1].At.Equal(at.Add(time.Minute)) {
		t.Fatalf("backfill of the last hour: %+v", got)
	}
}

func TestInboxAckStateAndCursors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	c := f.Client(t, registry.Client{Name: "acme"}, "door1")
	m := f.Member(t, c.ID, "alice", registry.Backfill{})
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for i := range 5 {
		f.create(t, stateChanged(fmt.Sprint("e", i), "door1", i%2, at.Add(time.Duration(i)*time.Second)))
	}
	if err := f.in.AckInbox(f.ctx, m.ID, 3); err != nil {
		t.Fatal(err)
	}
	if err := f.in.AckInbox(f.ctx, m.ID, 2); err != nil {
		t.Fatal(err)
	}
	if err := f.in.AckInbox(f.ctx, m.ID, 6); !errors.Is(err, inbox.ErrSeqAhead) {
		t.Fatalf("ack beyond the newest: %v", err)
	}
	if err := f.in.AckInbox(f.ctx, uuid.NewString(), 1); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("ack of an unknown member: %v", err)
	}
	state, err := f.in.GetInboxState(f.ctx, m.ID)
	if err != nil || state.AckedSeq != 3 || state.LastSeq != 5 || state.FirstSeq != 1 || state.Epoch == "" {
		t.Fatalf("state %+v %v", state, err)
	}
	// A deleted message is skipped by the stream too.
	ids := f.inbox(t, m.ID)
	if _, err := f.in.MarkInbox(f.ctx, m.ID, inbox.ActionDelete, []string{ids[3].ID}, false); err != nil {
		t.Fatal(err)
	}
	got, err := f.in.InboxAfter(f.ctx, []inbox.Cursor{
		{MemberID: m.ID, After: 3, Limit: 10},
		{MemberID: m.ID, After: 0, Limit: 2},
		{MemberID: uuid.NewString(), After: 0, Limit: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seqs(got[0]), []int64{5}) || !slices.Equal(seqs(got[1]), []int64{1, 2}) || len(got[2]) != 0 {
		t.Fatalf("cursors: %v %v %v", seqs(got[0]), seqs(got[1]), seqs(got[2]))
	}
}

func TestInboxPartitionsAndMemberLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	names, err := f.in.CreateInboxPartitions(f.ctx, time.Date(2027, 1, 31, 23, 0, 0, 0, time.UTC), 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"inbox_messages_202701", "inbox_messages_202702", "inbox_messages_202703"}) {
		t.Fatalf("partitions %v", names)
	}
	if _, err := f.in.CreateInboxPartitions(f.ctx, time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC), 0); err != nil {
		t.Fatalf("creating an existing partition again: %v", err)
	}

	c := f.Client(t, registry.Client{Name: "acme"}, "door1")
	hash := sha256.Sum256([]byte("token"))
	m, _, err := f.reg.CreateMember(f.ctx, registry.Member{ClientID: c.ID, Name: "alice", Email: "a@example.com",
		Timezone: "Europe/Paris", Preferences: registry.MemberPreferences{Email: registry.EmailDigest, DigestTimes: []string{"08:30"}},
		PushTargets: []storage.PushTarget{{Platform: storage.PlatformIOS, PushKey: "k1"}}}, hash[:], registry.Backfill{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.reg.CreateMember(f.ctx, registry.Member{ClientID: uuid.NewString(), Name: "x",
		Timezone: "UTC"}, []byte("other"), registry.Backfill{}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("member of an unknown client: %v", err)
	}
	byToken, err := f.reg.MemberByTokenHash(f.ctx, hash[:], registry.DefaultMemberTokenIdle)
	if err != nil || byToken.ID != m.ID || byToken.Timezone != "Europe/Paris" || byToken.Preferences.Email != registry.EmailDigest ||
		len(byToken.PushTargets) != 1 || byToken.Email != "a@example.com" {
		t.Fatalf("by token: %+v %v", byToken, err)
	}
	newHash := sha256.Sum256([]byte("token2"))
	if _, err := f.reg.RotateMemberToken(f.ctx, m.ID, newHash[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reg.MemberByTokenHash(f.ctx, hash[:], registry.DefaultMemberTokenIdle); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("old token after rotation: %v", err)
	}
	empty := ""
	updated, err := f.reg.UpdateMember(f.ctx, m.ID, registry.MemberUpdate{Email: &empty, PushTargets: &[]storage.PushTarget{}})
	if err != nil || updated.Email != "" || len(updated.PushTargets) != 0 || updated.Name != "alice" {
		t.Fatalf("update: %+v %v", updated, err)
	}
	f.create(t, stateChanged("e1", "door1", 1, time.Now()))
	if err := f.reg.DeleteMember(f.ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reg.GetMember(f.ctx, m.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("deleted member: %v", err)
	}
	if total, _, err := f.in.ListInbox(f.ctx, inbox.Query{MemberID: m.ID, IncludeSeen: true,
		Sort: inbox.SortTimestamp, CountOnly: true}); err != nil || total != 0 {
		t.Fatalf("deleted member's messages: %d %v", total, err)
	}
}

// TestRecordNotificationOncePerKey: copies of a keyed notification recorded at
// once, to a client's every member with an email each, add one message per
// member and one email per member, however many copies race; the others come
// back Duplicate having written nothing. A failed recording (unknown member)
// leaves its key free.
func TestRecordNotificationOncePerKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.Client(t, registry.Client{Name: "acme"})
	var members []registry.Member
	for _, name := range []string{"alice", "bob"} {
		hash := sha256.Sum256([]byte("lsm_" + uuid.NewString()))
		m, _, err := f.reg.CreateMember(f.ctx, registry.Member{ClientID: c.ID, Name: name, Email: name + "@example.com",
			Timezone: "UTC", Preferences: registry.DefaultMemberPreferences()}, hash[:], registry.Backfill{})
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
	}
	n := inbox.FreeFormNotification{ClientID: c.ID, Type: "billing", Subject: "invoice", Email: true, Key: "amqp-id:inv-1"}
	const copies = 8
	results := make([]inbox.RecordedNotification, copies)
	var wg sync.WaitGroup
	for i := range copies {
		wg.Go(func() {
			var err error
			if results[i], err = f.in.RecordNotification(f.ctx, n); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	recorded := 0
	for _, r := range results {
		switch {
		case !r.Duplicate && r.Messages == 2 && r.Emails == 2:
			recorded++
		case r.Duplicate && r.Messages == 0 && r.Emails == 0:
		default:
			t.Errorf("recorded %+v", r)
		}
	}
	if recorded != 1 {
		t.Errorf("%d copies recorded, want 1", recorded)
	}
	for _, m := range members {
		if got := f.inbox(t, m.ID); len(got) != 1 {
			t.Errorf("%s has %d messages, want 1", m.Name, len(got))
		}
	}
	ds, err := f.pg.ListClientDeliveries(f.ctx, c.ID, storage.DeliveryFilter{}, storage.Page{Limit: 100})
	if err != nil || len(ds) != 2 {
		t.Errorf("%d deliveries (%v), want 2 emails", len(ds), err)
	}

	gone := inbox.FreeFormNotification{MemberID: uuid.NewString(), Type: "billing", Subject: "x", Key: "amqp-id:inv-2"}
	if _, err := f.in.RecordNotification(f.ctx, gone); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("recording for an unknown member: %v, want ErrNotFound", err)
	}
	gone.MemberID = members[0].ID
	if r, err := f.in.RecordNotification(f.ctx, gone); err != nil || r.Duplicate || r.Messages != 1 {
		t.Errorf("recording under a key a failed recording used: %+v, %v", r, err)
	}
}

// stateChanged is a state change of the sensor for the fan-out to write.
func stateChanged(id, sensor string, data int, at time.Time) storage.NotificationInput {
	prev := 1 - data
	return storage.NotificationInput{EventID: id, Type: "state_changed", SensorID: sensor, Data: &data, Previous: &prev, At: at}
}

// The free-form notifications' emails wake the retriers on the channel they
// listen on: storage's, which this package cannot import (storage imports it).
func TestOutboxChannelIsStorages(t *testing.T) {
	if inbox.OutboxChannel != storage.OutboxChannel {
		t.Fatalf("inbox wakes the retriers on %q, they listen on %q", inbox.OutboxChannel, storage.OutboxChannel)
	}
}

// A restore's message says how long its sensor was lost, from what the fan-out
// stored; one stored without an outage, and other types, say nothing of it.
func TestRestoredMessageSaysItsOutage(t *testing.T) {
	t.Parallel()
	restored := inbox.Message{Type: "connection_restored", SensorID: "d1", SensorAddress: "1 Main St",
		Message: json.RawMessage(`{"lost_since":"2026-03-01T10:00:00Z","silent_seconds":8040}`)}
	subject, text := restored.Describe()
	if subject != "d1 is back online after 2 h 14 min" ||
		!strings.Contains(string(text), "reports again after 2 h 14 min without a reading") ||
		!strings.Contains(string(text), "2026-03-01T10:00:00Z") {
		t.Errorf("restore: %q, %s", subject, text)
	}
	if since, silent, ok := restored.Outage(); !ok || silent != 8040 || !since.Equal(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("Outage() = %v, %d, %v", since, silent, ok)
	}
	for _, m := range []inbox.Message{
		{Type: "connection_restored", SensorID: "d1"},
		{Type: "connection_lost", SensorID: "d1", Message: restored.Message},
	} {
		if _, _, ok := m.Outage(); ok {
			t.Errorf("%+v has an outage", m)
		}
		if subject, _ := m.Describe(); strings.Contains(subject, "after") {
			t.Errorf("%s without an outage: %q", m.Type, subject)
		}
	}
}

// TestMemberMessageIDMatchesSQL: the live stream announces a shared message's
// copy with the id derived in Go; materializing writes the one SQL derives.
func TestMemberMessageIDMatchesSQL(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx := context.Background()
	for range 5 {
		shared, member := uuid.Must(uuid.NewV7()).String(), uuid.NewString()
		var want string
		if err := stores.Postgres.Pool().QueryRow(ctx, `SELECT lockstream_member_message_id($1, $2)::text`, shared, member).
			Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got := inbox.MemberMessageID(shared, member); got != want {
			t.Fatalf("MemberMessageID(%s, %s) = %s, SQL says %s", shared, member, got, want)
		}
	}
}
