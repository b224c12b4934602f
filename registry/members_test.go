package registry_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// memberRows counts, by table, the rows kept for the members, straight from
// the tables (the store's reads would hide a deleted member's rows).
func memberRows(t *testing.T, ctx context.Context, conn *pgx.Conn, ids ...string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range []string{"members", "member_push_targets", "member_inbox", "inbox_messages",
		"escalation_episodes", "member_digests", "member_emails"} {
		col := "member_id"
		if table == "members" {
			col = "id"
		}
		var n int
		if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s = ANY ($1::uuid[])`, table, col),
			ids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[table] = n
	}
	return out
}

func TestDeleteClientDeletesItsMembersAndTheirInboxes(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx := context.Background()
	f := &fixture{Fleet: &storagetest.Fleet{Stores: stores, Ctx: ctx}, pg: stores.Postgres, reg: stores.Registry, ctx: ctx}
	if _, err := f.reg.CreateSensor(ctx, registry.Sensor{ID: "door1", Address: "addr of door1"}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, stores.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })

	gone := f.Client(t, registry.Client{Name: "gone"}, "door1")
	kept := f.Client(t, registry.Client{Name: "kept"}, "door1")
	hash := sha256.Sum256([]byte("lsm_alice"))
	alice, _, err := f.reg.CreateMember(ctx, registry.Member{ClientID: gone.ID, Name: "alice", Email: "a@example.com",
		Timezone: "UTC", Preferences: registry.MemberPreferences{Email: registry.EmailDigest, DigestTimes: []string{"09:00"}},
		PushTargets: []storage.PushTarget{{Platform: storage.PlatformIOS, PushKey: "k1"}}}, hash[:], registry.Backfill{})
	if err != nil {
		t.Fatal(err)
	}
	bob := f.Member(t, gone.ID, "bob", registry.Backfill{})
	carol := f.Member(t, kept.ID, "carol", registry.Backfill{})

	at := time.Now().Add(-time.Minute)
	f.create(t, stateChanged("e1", "door1", 1, at), stateChanged("e2", "door1", 0, at.Add(time.Second)))
	if _, err := inbox.NewPostgresStore(f.pg).RecordNotification(ctx, inbox.FreeFormNotification{ClientID: gone.ID, Type: "notice",
		Subject: "hello", Email: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO member_digests (member_id, digest_seq, slot) VALUES ($1, 0, now())`,
		alice.ID); err != nil {
		t.Fatal(err)
	}
	before := memberRows(t, ctx, conn, alice.ID, bob.ID)
	for table, want := range map[string]int{"members": 2, "member_push_targets": 1, "member_inbox": 2,
		"inbox_messages": 6, "escalation_episodes": 4, "member_digests": 1, "member_emails": 1} {
		if before[table] != want {
			t.Fatalf("before the deletion: %s has %d rows of the members, want %d (%v)", table, before[table], want, before)
		}
	}
	keptBefore := memberRows(t, ctx, conn, carol.ID)

	if err := f.reg.DeleteClient(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	after := memberRows(t, ctx, conn, alice.ID, bob.ID)
	for table, n := range after {
		// The email delivery's content stays with the delivery (deleteMembers).
		want := 0
		if table == "member_emails" {
			want = 1
		}
		if n != want {
			t.Errorf("after the deletion: %s has %d rows of the deleted members, want %d", table, n, want)
		}
	}
	if keptAfter := memberRows(t, ctx, conn, carol.ID); fmt.Sprint(keptAfter) != fmt.Sprint(keptBefore) {
		t.Errorf("another client's member: rows %v before, %v after", keptBefore, keptAfter)
	}
	if err := f.reg.DeleteClient(ctx, gone.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("deleting again: %v, want ErrNotFound", err)
	}
}

// TestDeleteClientWhileWritingLeavesNoOrphan deletes clients while the fan-out
// writes their members' inboxes and members are being added: no inbox message
// outlives its member.
func TestDeleteClientWhileWritingLeavesNoOrphan(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx := context.Background()
	f := &fixture{Fleet: &storagetest.Fleet{Stores: stores, Ctx: ctx}, pg: stores.Postgres, reg: stores.Registry, ctx: ctx}
	if _, err := f.reg.CreateSensor(ctx, registry.Sensor{ID: "door1", Address: "addr of door1"}); err != nil {
		t.Fatal(err)
	}
	const clients = 8
	ids := make([]string, clients)
	for i := range ids {
		c := f.Client(t, registry.Client{Name: fmt.Sprint("c", i)}, "door1")
		ids[i] = c.ID
		for j := range 3 {
			f.Member(t, c.ID, fmt.Sprint("m", j), registry.Backfill{Window: time.Hour, Max: 20})
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3*clients)
	wg.Go(func() { // the fan-out
		at := time.Now().Add(-time.Minute)
		for i := range 40 {
			data := i % 2
			if _, err := fanout.NewPostgresStore(f.pg).CreateNotifications(ctx, []storage.NotificationInput{{EventID: fmt.Sprint("e", i),
				Type: "state_changed", SensorID: "door1", Data: &data, At: at.Add(time.Duration(i) * time.Millisecond)}}); err != nil {
				errs <- err
			}
		}
	})
	for _, id := range ids {
		wg.Go(func() { // a member added (with a backfill) as the client goes
			hash := sha256.Sum256([]byte("lsm_" + uuid.NewString()))
			_, _, err := f.reg.CreateMember(ctx, registry.Member{ClientID: id, Name: "late", Timezone: "UTC",
				Preferences: registry.DefaultMemberPreferences()}, hash[:], registry.Backfill{Window: time.Hour, Max: 20})
			if err != nil && !errors.Is(err, storage.ErrNotFound) {
				errs <- err
			}
		})
		wg.Go(func() {
			if err := f.reg.DeleteClient(ctx, id); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, stores.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	var members, orphans int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM members),
		(SELECT count(*) FROM inbox_messages m WHERE NOT EXISTS (SELECT 1 FROM members WHERE id = m.member_id))`).
		Scan(&members, &orphans); err != nil {
		t.Fatal(err)
	}
	if members != 0 || orphans != 0 {
		t.Fatalf("after deleting every client: %d members left, %d inbox messages of no member", members, orphans)
	}
}

// TestMemberTokenIdle: a lookup records the token's use at most once an hour;
// a token whose last use is the idle limit or more ago is refused with
// ErrTokenIdle (naming its member) and stays refused; rotation gives a working
// token; without a limit no token is idle. The use is moved back in Postgres,
// never waited for.
func TestMemberTokenIdle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.Client(t, registry.Client{Name: "acme"})
	hash := sha256.Sum256([]byte("lsm_idle_" + c.ID))
	m, _, err := f.reg.CreateMember(f.ctx, registry.Member{ClientID: c.ID, Name: "alice", Timezone: "UTC",
		Preferences: registry.DefaultMemberPreferences()}, hash[:], registry.Backfill{})
	if err != nil {
		t.Fatal(err)
	}
	const idle = 60 * 24 * time.Hour
	step := func(name string, age time.Duration, limit time.Duration, wantErr error, wantAge func(time.Duration) bool) {
		t.Helper()
		if err := storagetest.SetMemberTokenUsed(f.ctx, f.pg, m.ID, age); err != nil {
			t.Fatal(err)
		}
		got, err := f.reg.MemberByTokenHash(f.ctx, hash[:], limit)
		if !errors.Is(err, wantErr) || got.ID != m.ID {
			t.Errorf("%s: member %q, %v; want %s, %v", name, got.ID, err, m.ID, wantErr)
		}
		after, err := storagetest.MemberTokenUsedAge(f.ctx, f.pg, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !wantAge(after) {
			t.Errorf("%s: last use %s ago after the lookup", name, after)
		}
	}
	recorded := func(d time.Duration) bool { return d < time.Minute }
	unchanged := func(age time.Duration) func(time.Duration) bool {
		return func(d time.Duration) bool { return d >= age && d < age+time.Minute }
	}
	step("used 30 minutes ago", 30*time.Minute, idle, nil, unchanged(30*time.Minute))
	step("used 2 hours ago", 2*time.Hour, idle, nil, recorded)
	step("used 59 days ago", 59*24*time.Hour, idle, nil, recorded)
	step("unused 60 days", idle, idle, registry.ErrTokenIdle, unchanged(idle))
	step("unused 61 days", 61*24*time.Hour, idle, registry.ErrTokenIdle, unchanged(61*24*time.Hour))
	step("unused a year, no limit", 365*24*time.Hour, 0, nil, recorded)

	if err := storagetest.SetMemberTokenUsed(f.ctx, f.pg, m.ID, 61*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	rotated := sha256.Sum256([]byte("lsm_rotated_" + c.ID))
	if _, err := f.reg.RotateMemberToken(f.ctx, m.ID, rotated[:]); err != nil {
		t.Fatal(err)
	}
	if got, err := f.reg.MemberByTokenHash(f.ctx, rotated[:], idle); err != nil || got.ID != m.ID {
		t.Errorf("rotated token: %+v, %v", got, err)
	}
}
