package escalation_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/escalation"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// The contract's episodes, through the storage the fan-out and the API write
// and the round the daemon runs, with the clock moved instead of waiting.
func TestRoundEscalatesEachEpisodeOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1", "door2")
	c := f.client(t, "door1", "door2")
	alice := f.member(t, c.ID, "alice", nil)                                             // leaves it unseen
	bob := f.member(t, c.ID, "bob", nil)                                                 // sees it in time
	f.member(t, c.ID, "carol", func(m *registry.Member) { m.Preferences.Email = "off" }) // email off
	dave := f.member(t, c.ID, "dave", func(m *registry.Member) { m.Preferences.Push = false; m.PushTargets = nil })
	now := time.Now()
	e := f.escalator(t, &now)

	f.flip(t, "state_changed", 1, "door1")
	if res := f.round(t, e); res.Episodes != 0 {
		t.Fatalf("nothing is due yet, the round handled %+v", res)
	}
	f.markAll(t, bob.ID, inbox.ActionSeen)

	// After the push wait: one push per member with a device and push on.
	now = time.Now().Add(3 * time.Minute)
	if res := f.round(t, e); res.Pushes != 2 || res.Emails != 0 {
		t.Fatalf("after the push wait: %+v, want 2 pushes (alice, carol) and no email", res)
	}
	f.flip(t, "state_changed", 0, "door1") // joins the episodes (bob's ended: a new one he sees in time too)
	f.markAll(t, bob.ID, inbox.ActionSeen)

	// After the email wait: one email each for alice and dave; carol has it off.
	now = time.Now().Add(16 * time.Minute)
	if res := f.round(t, e); res.Emails != 2 || res.Pushes != 0 {
		t.Fatalf("after the email wait: %+v, want 2 emails (alice, dave)", res)
	}
	if res := f.round(t, e); res.Emails+res.Pushes != 0 {
		t.Fatalf("a second round escalated again: %+v", res)
	}
	got := byTarget(f.escalations(t, c.ID))
	want := map[string]int{"unseen member:" + alice.ID: 1, "unseen member:" + dave.ID: 1,
		"unseen IOS:dev-alice": 1, "unseen IOS:dev-carol": 1}
	if len(got) != len(want) {
		t.Fatalf("escalations %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("escalations %v, want %v", got, want)
		}
	}

	// Alice's email lists both flips, newest first.
	var aliceEmail string
	for _, d := range f.escalations(t, c.ID) {
		if d.Target == "member:"+alice.ID {
			aliceEmail = d.ID
		}
	}
	emails, err := f.pg.MemberEmails(f.ctx, []string{aliceEmail})
	if err != nil {
		t.Fatal(err)
	}
	me := emails[aliceEmail]
	if me.Email != "alice@example.com" || len(me.Messages) != 2 || *me.Messages[0].Data != 0 || *me.Messages[1].Data != 1 {
		t.Fatalf("alice's email: %+v", me)
	}

	// Alice sees everything: the next flip opens a new episode and a new email.
	f.markAll(t, alice.ID, inbox.ActionSeen)
	f.flip(t, "state_changed", 1, "door1")
	f.markAll(t, bob.ID, inbox.ActionSeen)
	now = time.Now().Add(16 * time.Minute)
	// Alice's new episode; dave's is still the old one (handled), bob saw it.
	if res := f.round(t, e); res.Emails != 1 {
		t.Fatalf("after alice saw everything and a new flip: %+v, want alice's new email", res)
	}
	if n := byTarget(f.escalations(t, c.ID))["unseen member:"+alice.ID]; n != 2 {
		t.Fatalf("alice has %d emails, want 2 (one per episode)", n)
	}
	if n := byTarget(f.escalations(t, c.ID))["unseen member:"+dave.ID]; n != 1 {
		t.Fatalf("dave has %d emails, want 1 (his episode never ended)", n)
	}
	if n := byTarget(f.escalations(t, c.ID))["unseen member:"+bob.ID]; n != 0 {
		t.Fatalf("bob saw the first flip in time but has %d emails", n)
	}
}

// A member who marks a message unseen itself starts no episode; one whose
// client was unlinked from the sensor gets nothing for it.
func TestRoundSkipsSelfUnseenAndLostAccess(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1", "door2")
	c1 := f.client(t, "door1")
	c2 := f.client(t, "door2")
	erin := f.member(t, c1.ID, "erin", nil)
	frank := f.member(t, c2.ID, "frank", nil)
	now := time.Now()
	e := f.escalator(t, &now)

	f.flip(t, "state_changed", 1, "door1", "door2")
	f.markAll(t, erin.ID, inbox.ActionSeen)
	f.markAll(t, erin.ID, inbox.ActionUnseen)
	if err := f.reg.UnlinkSensor(f.ctx, c2.ID, "door2"); err != nil {
		t.Fatal(err)
	}
	now = time.Now().Add(time.Hour)
	res := f.round(t, e)
	if res.Emails+res.Pushes+res.Digests != 0 || res.Episodes != 2 {
		t.Fatalf("round: %+v, want 2 episodes handled and nothing sent", res)
	}
	if d := f.escalations(t, c1.ID); len(d) != 0 {
		t.Fatalf("erin marked it unseen herself, yet: %+v", d)
	}
	if d := f.escalations(t, c2.ID); len(d) != 0 {
		t.Fatalf("frank's client no longer watches door2, yet: %+v", d)
	}
	_ = frank
}

// A critical message escalates after a quarter of each wait.
func TestRoundCriticalWaitsAQuarter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	c := f.client(t, "door1")
	f.member(t, c.ID, "gina", nil)
	now := time.Now()
	e := f.escalator(t, &now)
	f.flip(t, "connection_lost", 0, "door1") // lost while unlocked: critical
	now = time.Now().Add(4 * time.Minute)    // past 15m/4, before 15m
	if res := f.round(t, e); res.Emails != 1 || res.Pushes != 1 {
		t.Fatalf("critical after 4 minutes: %+v, want the email and the push", res)
	}
}

// A digest member gets one digest at its digest time in its timezone, listing
// what it has not seen, and none when there is nothing.
func TestRoundDigestAtDigestTimes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	c := f.client(t, "door1")
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	// The digest time is two hours after the real now in Paris (the
	// message is written at the database's now): the only time of day of
	// that name between the message and the rounds below is nine itself,
	// whatever the hour the test runs at. A fixed "09:00" failed when run
	// between 08:00 and 09:00 Paris: that day's 09:00 fell between.
	nine := time.Now().In(paris).Add(2 * time.Hour).Truncate(time.Minute)
	digestAt := nine.Format("15:04")
	hana := f.member(t, c.ID, "hana", func(m *registry.Member) {
		m.Timezone, m.Preferences.Email, m.Preferences.DigestTimes = "Europe/Paris", "digest", []string{digestAt}
		m.PushTargets = nil
	})
	// ivan's digest comes at the same instant, named in UTC.
	ivan := f.member(t, c.ID, "ivan", func(m *registry.Member) {
		m.Preferences.Email, m.Preferences.DigestTimes = "digest", []string{nine.UTC().Format("15:04")}
		m.PushTargets = nil
	})
	f.markAll(t, ivan.ID, inbox.ActionSeen)
	now := nine.Add(-time.Minute)
	e := f.escalator(t, &now)
	f.flip(t, "state_changed", 1, "door1")
	f.markAll(t, ivan.ID, inbox.ActionSeen) // ivan has nothing unseen

	if res := f.round(t, e); res.Digests != 0 {
		t.Fatalf("before %s Paris: %+v", digestAt, res)
	}
	now = nine.Add(time.Second)
	if res := f.round(t, e); res.Digests != 1 || res.DigestMembers < 1 {
		t.Fatalf("at %s Paris: %+v, want one digest (hana)", digestAt, res)
	}
	if res := f.round(t, e); res.Digests != 0 {
		t.Fatalf("again at %s: %+v, want none", digestAt, res)
	}
	ds := f.escalations(t, c.ID)
	digests := byTarget(ds)
	if digests["digest member:"+hana.ID] != 1 || digests["digest member:"+ivan.ID] != 0 || len(ds) != 1 {
		t.Fatalf("deliveries %v: want one digest, hana's", digests)
	}
	// The next day: nothing new unseen → no digest.
	now = nine.AddDate(0, 0, 1).Add(time.Second)
	if res := f.round(t, e); res.Digests != 0 {
		t.Fatalf("the next day with nothing new: %+v", res)
	}
}

// Rounds run at once by several escalators never escalate an episode twice.
func TestConcurrentRoundsEscalateOnce(t *testing.T) {
	t.Parallel()
	sensors := []string{"s1", "s2", "s3", "s4", "s5"}
	f := newFixture(t, sensors...)
	c := f.client(t, sensors...)
	for _, name := range []string{"m1", "m2", "m3", "m4"} {
		f.member(t, c.ID, name, nil)
	}
	f.flip(t, "state_changed", 1, sensors...)
	now := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	for range 6 {
		e := f.escalator(t, &now)
		wg.Go(func() {
			for range 3 {
				if _, err := e.RunRound(f.ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// One email and one push per member (the rounds ran at one time: the
	// first handled every due episode), each listing its 5 episodes.
	got := byTarget(f.escalations(t, c.ID))
	if len(got) != 8 { // 4 members × (email + device)
		t.Fatalf("escalations %v", got)
	}
	for k, n := range got {
		if n != 1 {
			t.Fatalf("%s: %d deliveries, want 1 (one per member and channel per round)", k, n)
		}
	}
	episodes := f.escalated(t, c.ID)
	if len(episodes) != 8*len(sensors) {
		t.Fatalf("episodes escalated %v, want %d (4 members × 5 sensors × 2 channels)", episodes, 8*len(sensors))
	}
	for k, n := range episodes {
		if n != 1 {
			t.Fatalf("%s: escalated %d times", k, n)
		}
	}
}

// A new member's backfilled messages (cause new_member) start an episode; a
// free-form notification's episode is per type.
func TestRoundBackfillAndFreeForm(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	c := f.client(t, "door1")
	f.flip(t, "state_changed", 1, "door1")
	hash := [32]byte{1}
	late, n, err := f.reg.CreateMember(f.ctx, registry.Member{ClientID: c.ID, Name: "late", Email: "late@example.com",
		Timezone: "UTC", Preferences: registry.DefaultMemberPreferences()}, hash[:],
		registry.Backfill{Window: time.Hour, Max: 20})
	if err != nil || n != 1 {
		t.Fatalf("backfill: %d messages, %v", n, err)
	}
	for _, typ := range []string{"invoice", "invoice", "news"} {
		if _, err := inbox.NewPostgresStore(f.pg).RecordNotification(f.ctx, inbox.FreeFormNotification{MemberID: late.ID, Type: typ,
			Subject: "about " + typ}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().Add(time.Hour)
	e := f.escalator(t, &now)
	if res := f.round(t, e); res.Emails != 1 || res.Episodes != 3 {
		t.Fatalf("round: %+v, want 3 episodes (door1 backfilled, invoice, news) and 1 email", res)
	}
	ds := f.escalations(t, c.ID)
	if len(ds) != 1 {
		t.Fatalf("escalations %+v, want one email", ds)
	}
	emails, err := f.pg.MemberEmails(f.ctx, []string{ds[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	// Newest first: news, the two invoices, then door1's backfilled flip.
	me := emails[ds[0].ID]
	if len(me.Messages) != 4 || me.Messages[0].Type != "news" || me.Messages[1].Subject != "about invoice" ||
		me.Messages[2].Subject != "about invoice" || me.Messages[1].Cause != inbox.CauseEvent ||
		me.Messages[3].SensorID != "door1" || me.Messages[3].Cause != inbox.CauseNewMember {
		t.Fatalf("the email lists %+v", me.Messages)
	}
}

// What a round's deliveries carry: distinct UUIDv7 ids of the round's time;
// and an episode about a sensor, which has neither a member_emails nor a
// pushes row, still has an email that lists its message and a push request
// naming the device, the prototype and the sensor, as a free-form episode's
// rows do.
func TestRoundDeliveriesSayWhatToSend(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	c := f.client(t, "door1")
	hana := f.member(t, c.ID, "hana", nil)
	f.flip(t, "state_changed", 1, "door1")
	if _, err := inbox.NewPostgresStore(f.pg).RecordNotification(f.ctx, inbox.FreeFormNotification{MemberID: hana.ID, Type: "invoice",
		Subject: "about invoice"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Hour)
	e := f.escalator(t, &now)
	before := time.Now().Truncate(time.Millisecond)
	if res := f.round(t, e); res.Episodes != 2 || res.Emails != 1 || res.Pushes != 1 {
		t.Fatalf("round: %+v, want one email and one push for door1 and the invoice", res)
	}
	after := time.Now()
	var emailIDs, pushIDs []string
	seen := map[uuid.UUID]bool{}
	for _, d := range f.escalations(t, c.ID) {
		id, err := uuid.Parse(d.ID)
		if err != nil || id.Version() != 7 || id.Variant() != uuid.RFC4122 || seen[id] {
			t.Fatalf("delivery id %s (version %d, variant %v, seen before %v): %v", d.ID, id.Version(), id.Variant(), seen[id], err)
		}
		seen[id] = true
		if at := time.Unix(id.Time().UnixTime()); at.Before(before) || at.After(after) {
			t.Fatalf("delivery id %s is of %v, the round ran between %v and %v", d.ID, at, before, after)
		}
		if d.Channel == storage.ChannelEmail {
			emailIDs = append(emailIDs, d.ID)
		} else {
			pushIDs = append(pushIDs, d.ID)
		}
	}
	emails, err := f.pg.MemberEmails(f.ctx, emailIDs)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, me := range emails {
		if me.Email != "hana@example.com" || len(me.Messages) != 2 {
			t.Fatalf("email %+v, want two messages to hana", me)
		}
		for _, m := range me.Messages {
			listed[m.SensorID+m.Type] = true
		}
	}
	if len(emails) != 1 || !listed["door1state_changed"] || !listed["invoice"] {
		t.Fatalf("emails list %v, want door1's flip and the invoice", listed)
	}
	reqs, err := f.pg.PushRequests(f.ctx, pushIDs)
	if err != nil {
		t.Fatal(err)
	}
	said := map[string]bool{}
	for _, r := range reqs {
		if r.Platform != storage.PlatformIOS || r.PushKey != "dev-hana" || r.MessagePrototypeKey != inbox.UnseenPushPrototype {
			t.Fatalf("push request %+v, want hana's device and %s", r, inbox.UnseenPushPrototype)
		}
		said[r.Message] = true
	}
	if len(reqs) != 1 || !said["You have unseen notifications about 2 subjects"] {
		t.Fatalf("pushes say %v", said)
	}
}

// A member prefers one mail to ten: a round sends each member one email and
// one push per device for all its due episodes, the email listing every one of
// them; an episode opened later gets the next round's email, which lists it
// alone, and a message joining an episode already escalated escalates nothing.
// Rounds cut by a small limit hand each episode to exactly one of them.
func TestRoundOneEmailPerMemberListsEveryEpisode(t *testing.T) {
	t.Parallel()
	sensors := []string{"d1", "d2", "d3", "d4"}
	f := newFixture(t, sensors...)
	c := f.client(t, sensors...)
	jo := f.member(t, c.ID, "jo", nil)
	kim := f.member(t, c.ID, "kim", nil)
	f.flip(t, "state_changed", 1, "d1", "d2", "d3")
	now := time.Now().Add(time.Hour)
	e := f.escalator(t, &now)
	if res := f.round(t, e); res.Episodes != 6 || res.Emails != 2 || res.Pushes != 2 {
		t.Fatalf("round: %+v, want 6 episodes, an email and a push per member", res)
	}
	listed := func(memberID string) [][]string {
		var out [][]string
		for _, d := range f.escalations(t, c.ID) {
			if d.Target != "member:"+memberID {
				continue
			}
			emails, err := f.pg.MemberEmails(f.ctx, []string{d.ID})
			if err != nil {
				t.Fatal(err)
			}
			var ss []string
			for _, m := range emails[d.ID].Messages {
				ss = append(ss, m.SensorID)
			}
			out = append(out, ss)
		}
		return out
	}
	if got := listed(jo.ID); len(got) != 1 || strings.Join(got[0], ",") != "d3,d2,d1" {
		t.Fatalf("jo's emails list %v, want one listing d3, d2, d1", got)
	}
	reqs := map[string]string{}
	for _, d := range f.escalations(t, c.ID) {
		if d.Channel == storage.ChannelSwrve {
			r, err := f.pg.PushRequests(f.ctx, []string{d.ID})
			if err != nil {
				t.Fatal(err)
			}
			reqs[r[d.ID].PushKey] = r[d.ID].Message
		}
	}
	if reqs["dev-jo"] != "You have unseen notifications about 3 sensors" {
		t.Fatalf("pushes say %v", reqs)
	}

	f.flip(t, "state_changed", 0, "d1") // joins d1's escalated episodes
	f.flip(t, "state_changed", 1, "d4") // opens new ones
	if res := f.round(t, e); res.Episodes != 2 || res.Emails != 2 || res.Pushes != 2 {
		t.Fatalf("second round: %+v, want d4's 2 episodes, an email and a push per member", res)
	}
	if got := listed(kim.ID); len(got) != 2 || strings.Join(got[1], ",") != "d4" && strings.Join(got[0], ",") != "d4" {
		t.Fatalf("kim's emails list %v, want a second one listing d4 alone", got)
	}
	if res := f.round(t, e); res.Episodes+res.Emails+res.Pushes != 0 {
		t.Fatalf("third round: %+v, want nothing", res)
	}
	for k, n := range f.escalated(t, c.ID) {
		if n != 1 {
			t.Fatalf("%s: escalated %d times", k, n)
		}
	}

	// Ten members, rounds of at most 3 episodes.
	g := newFixture(t, sensors...)
	gc := g.client(t, sensors...)
	for i := range 10 {
		g.member(t, gc.ID, fmt.Sprintf("n%d", i), nil)
	}
	g.flip(t, "state_changed", 1, sensors...)
	small, err := escalation.New(escalation.Config{Limit: 3, Now: func() time.Time { return now }},
		escalation.NewPostgresStore(g.pg), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	handled := 0
	for range 100 {
		res := g.round(t, small)
		if res.Episodes == 0 {
			break
		}
		handled += res.Episodes
	}
	got := g.escalated(t, gc.ID)
	if len(got) != 10*len(sensors)*2 {
		t.Fatalf("%d (channel, target, episode) escalated over rounds handling %d, want %d", len(got), handled, 10*len(sensors)*2)
	}
	for k, n := range got {
		if n != 1 {
			t.Fatalf("%s: escalated %d times", k, n)
		}
	}
}

// A fan-out that died after its commit, before it wrote its members' copies
// of a shared message, leaves them to whoever comes next: the round writes
// them first, so the member's unseen message is escalated all the same.
func TestRoundEscalatesSharedMessagesACrashLeftUncopied(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	c := f.client(t, "door1")
	alice := f.member(t, c.ID, "alice", func(m *registry.Member) { m.Preferences.Push = false; m.PushTargets = nil })
	data := 1
	events := []storage.NotificationInput{{EventID: "ev-crash", Type: "state_changed", SensorID: "door1", Data: &data,
		At: time.Now()}}
	died := func() (r any) {
		defer func() { r = recover() }()
		_, _ = fanout.NewPostgresStore(f.pg).CreateNotificationsClaiming(f.ctx, events, fanout.Claim{
			Committed: func([]storage.Delivery, map[string]storage.DeliveryTarget) {
				panic("the fan-out died after its commit")
			}})
		return nil
	}()
	if died == nil {
		t.Fatal("the fan-out's write did not reach its commit callback")
	}
	var waiting int
	if err := f.pg.Pool().QueryRow(f.ctx, `SELECT count(*) FROM inbox_shared`).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	if waiting == 0 {
		t.Fatal("no shared message waits for its copies: the crash was not reproduced")
	}

	now := time.Now().Add(16 * time.Minute)
	e := f.escalator(t, &now)
	if res := f.round(t, e); res.Emails != 1 {
		t.Fatalf("after the email wait: %+v, want alice's email", res)
	}
	if got := byTarget(f.escalations(t, c.ID)); got["unseen member:"+alice.ID] != 1 || len(got) != 1 {
		t.Fatalf("escalations %v, want one email for alice", got)
	}
}
