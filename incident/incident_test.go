package incident_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/incident"
	"github.com/lockstream/lockstream/registry"
)

// A loss while unlocked opens one incident of the sensor; later events attach;
// the restore resolves it with its duration; a later loss opens a new one;
// warnings open too; intake read twice changes nothing.
func TestIntakeOpensAttachesResolves(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1", "door2")
	c := f.client(t, "door1", "door2")

	f.event(t, "connection_lost", 0, 0, "door1")
	f.event(t, "connection_lost", 1, time.Minute, "door2") // a warning
	if res := f.intake(t); res.Opened != 2 || res.Events != 2 {
		t.Fatalf("intake %+v, want 2 events opening 2 incidents", res)
	}
	f.event(t, "sensor_open_too_long", 0, 2*time.Minute, "door1")
	f.event(t, "connection_restored", 0, 30*time.Minute, "door1")
	if res := f.intake(t); res.Attached != 1 || res.Resolved != 1 || res.Opened != 0 {
		t.Fatalf("intake %+v, want 1 attached and 1 resolved", res)
	}
	if res := f.intake(t); res.Events != 0 {
		t.Fatalf("a second intake read %d events again", res.Events)
	}
	f.event(t, "connection_lost", 0, time.Hour, "door1")
	f.intake(t)

	got := f.incidents(t, c.ID)
	if len(got) != 3 {
		t.Fatalf("%d incidents, want 3: %+v", len(got), got)
	}
	byState := map[string][]string{}
	for _, i := range got {
		byState[i.Subject] = append(byState[i.Subject], i.State+"/"+i.Severity)
	}
	if strings.Join(byState["sensor:door1"], ",") != "open/critical,resolved/critical" ||
		strings.Join(byState["sensor:door2"], ",") != "open/warning" {
		t.Fatalf("incidents by subject %v", byState)
	}
	resolved := got[2] // newest first: the second loss, door2's, the resolved one
	if resolved.State != domain.IncidentResolved || resolved.Duration(time.Time{}) != 30*time.Minute || resolved.Events != 3 {
		t.Fatalf("resolved incident %+v, want 3 events and 30m", resolved)
	}
	full, err := f.store.Get(f.ctx, resolved.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range full.Timeline {
		kinds = append(kinds, e.Kind)
	}
	if strings.Join(kinds, ",") != "opened,attached,resolve" {
		t.Fatalf("timeline %v", kinds)
	}
}

// Tier 1 is reminded every repeat_every from the opening; tier 2 joins after
// its wait; reminders stop after loops rounds of the last tier.
func TestRemindersFollowTiersRepeatAndLoops(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	c := f.client(t, "door1")
	alice, bob := f.member(t, c.ID, "alice"), f.member(t, c.ID, "bob")
	f.policy(t, c.ID, domain.EscalationPolicy{Severities: []string{"critical"}, RepeatEvery: minutes(5), Loops: 2,
		Tiers: []domain.EscalationTier{{After: 0, Members: []string{alice.ID}}, {After: minutes(15), Members: []string{bob.ID}}}})
	f.event(t, "connection_lost", 0, 0, "door1")
	f.intake(t)

	// Due: alice at 0, 5, 10, 15, 20; bob at 15, 20 (stop at 15 + (2-1)×5).
	want := map[int][2]int{0: {1, 0}, 4: {1, 0}, 5: {2, 0}, 10: {3, 0}, 15: {4, 1}, 20: {5, 2}, 25: {5, 2}, 60: {5, 2}}
	for _, m := range []int{0, 4, 5, 10, 15, 20, 25, 60} {
		f.round(t, time.Duration(m)*time.Minute)
		a, b := len(f.reminders(t, alice.ID)), len(f.reminders(t, bob.ID))
		if w := want[m]; a != w[0] || b != w[1] {
			t.Fatalf("after the round at %dm: alice %d, bob %d reminders, want %v", m, a, b, w)
		}
	}
	r := f.reminders(t, bob.ID)[0]
	if r.Tier != 2 || !strings.HasPrefix(r.AckURL, "https://lockstream.example.com/ack/") {
		t.Fatalf("bob's reminder %+v", r)
	}
}

// A warning is not escalated by the default policy; an ack stops every
// reminder, and acking twice changes nothing.
func TestAckStopsReminders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1", "door2")
	c := f.client(t, "door1", "door2")
	alice, bob := f.member(t, c.ID, "alice"), f.member(t, c.ID, "bob")
	f.event(t, "connection_lost", 0, 0, "door1")
	f.event(t, "connection_lost", 1, 0, "door2") // warning: no reminders by default
	f.intake(t)
	if res := f.round(t, 0); res.Reminders != 2 {
		t.Fatalf("first round %+v, want 2 reminders (alice, bob, one incident)", res)
	}
	inc := f.reminders(t, alice.ID)[0].IncidentID
	acked, err := f.store.Act(f.ctx, inc, bob.ID, incident.Ack, "api", t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if acked.State != domain.IncidentAcknowledged || acked.AcknowledgedBy != bob.ID {
		t.Fatalf("acked %+v", acked)
	}
	again, err := f.store.Act(f.ctx, inc, alice.ID, incident.Ack, "api", t0.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if again.AcknowledgedBy != bob.ID || !again.AcknowledgedAt.Equal(*acked.AcknowledgedAt) {
		t.Fatalf("a second ack changed the incident: %+v", again)
	}
	for _, m := range []int{15, 30, 45, 60, 120} {
		if res := f.round(t, time.Duration(m)*time.Minute); res.Reminders != 0 {
			t.Fatalf("round at %dm after the ack: %+v", m, res)
		}
	}
	if _, err := f.store.Act(f.ctx, inc, bob.ID, incident.Resolve, "api", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := f.store.Get(f.ctx, inc, alice.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != domain.IncidentResolved || got.ResolvedBy != bob.ID {
		t.Fatalf("resolved %+v", got)
	}
	other := f.client(t)
	stranger := f.member(t, other.ID, "mallory")
	if _, err := f.store.Act(f.ctx, inc, stranger.ID, incident.Ack, "api", t0); err == nil {
		t.Fatal("a member of another client acknowledged the incident")
	}
}

// Rounds run concurrently by several workers (as several processes would)
// remind each member once per due time: no more, no fewer.
func TestConcurrentRoundsNeverRemindTwice(t *testing.T) {
	t.Parallel()
	const sensors, workers = 60, 4
	var ids []string
	for i := range sensors {
		ids = append(ids, "door"+string(rune('a'+i/26))+string(rune('a'+i%26)))
	}
	f := newFixture(t, ids...)
	c := f.client(t, ids...)
	members := []string{f.member(t, c.ID, "alice").ID, f.member(t, c.ID, "bob").ID, f.member(t, c.ID, "carol").ID}
	f.policy(t, c.ID, domain.EscalationPolicy{Severities: []string{"critical"}, RepeatEvery: minutes(1), Loops: 3,
		Tiers: []domain.EscalationTier{{After: 0}}})
	f.event(t, "connection_lost", 0, 0, ids...)
	f.intake(t)

	for _, m := range []int{0, 1, 2, 3} {
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := f.store.RemindRound(f.ctx, incident.Round{Now: t0.Add(time.Duration(m) * time.Minute), Limit: 7,
					AckTTL: time.Hour})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for { // what the small limit left behind, as a full round's follow-up would
			res := f.round(t, time.Duration(m)*time.Minute)
			if res.Sends == 0 {
				break
			}
		}
	}
	// Due at 0, 1, 2: three reminders per (incident, member).
	for _, m := range members {
		per := map[string]int{}
		for _, r := range f.reminders(t, m) {
			per[r.IncidentID]++
		}
		if len(per) != sensors {
			t.Fatalf("member %s reminded of %d incidents, want %d", m, len(per), sensors)
		}
		for inc, n := range per {
			if n != 3 {
				t.Fatalf("member %s reminded %d times of incident %s, want 3", m, n, inc)
			}
		}
	}
}

// The one-click link: a GET's peek acknowledges nothing; the first POST acks;
// the second says the token was used; an expired token says so.
func TestAckTokenSingleUse(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1", "door2")
	c := f.client(t, "door1", "door2")
	alice := f.member(t, c.ID, "alice")
	f.event(t, "connection_lost", 0, 0, "door1", "door2")
	f.intake(t)
	f.round(t, 0)
	rs := f.reminders(t, alice.ID)
	if len(rs) != 2 {
		t.Fatalf("%d reminders, want 2", len(rs))
	}
	token := rs[0].AckURL[strings.LastIndex(rs[0].AckURL, "/")+1:]
	if strings.Contains(token, rs[0].IncidentID) || strings.Contains(token, alice.ID) || len(token) < 32 {
		t.Fatalf("token %q names what it acknowledges", token)
	}
	now := t0.Add(time.Minute)
	for range 2 {
		if st, err := f.store.PeekToken(f.ctx, token, now); err != nil || st != incident.TokenValid {
			t.Fatalf("peek: %s %v", st, err)
		}
	}
	if inc, err := f.store.Get(f.ctx, rs[0].IncidentID, ""); err != nil || inc.State != domain.IncidentOpen {
		t.Fatalf("after peeks: %+v %v", inc, err)
	}
	st, inc, err := f.store.AckByToken(f.ctx, token, now)
	if err != nil || st != incident.TokenValid || inc.State != domain.IncidentAcknowledged || inc.AcknowledgedBy != alice.ID {
		t.Fatalf("ack by link: %s %+v %v", st, inc, err)
	}
	if st, _, err := f.store.AckByToken(f.ctx, token, now); err != nil || st != incident.TokenUsed {
		t.Fatalf("second use: %s %v", st, err)
	}
	other := rs[1].AckURL[strings.LastIndex(rs[1].AckURL, "/")+1:]
	if st, _, err := f.store.AckByToken(f.ctx, other, t0.Add(2*time.Hour)); err != nil || st != incident.TokenExpired {
		t.Fatalf("expired: %s %v", st, err)
	}
	if st, _, err := f.store.AckByToken(f.ctx, "nonsense", now); err != nil || st != incident.TokenUnknown {
		t.Fatalf("unknown: %s %v", st, err)
	}
}

// Expired ack tokens are purged once they are a day past their expiry, and
// only those.
func TestPurgeTokens(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	c := f.client(t, "door1")
	alice := f.member(t, c.ID, "alice")
	f.event(t, "connection_lost", 0, 0, "door1")
	f.intake(t)
	f.round(t, 0)              // a token expiring at t0+1h
	f.round(t, 15*time.Minute) // the default policy's next reminder: t0+1h15m
	rs := f.reminders(t, alice.ID)
	if len(rs) != 2 {
		t.Fatalf("%d reminders, want 2", len(rs))
	}
	n, err := f.store.PurgeTokens(f.ctx, t0.Add(time.Hour+time.Minute), 100)
	if err != nil || n != 1 {
		t.Fatalf("purged %d %v, want 1", n, err)
	}
	token := func(r reminder) string { return r.AckURL[strings.LastIndex(r.AckURL, "/")+1:] }
	if st, err := f.store.PeekToken(f.ctx, token(rs[0]), t0); err != nil || st != incident.TokenUnknown {
		t.Fatalf("purged token: %s %v", st, err)
	}
	if st, err := f.store.PeekToken(f.ctx, token(rs[1]), t0); err != nil || st != incident.TokenValid {
		t.Fatalf("kept token: %s %v", st, err)
	}
}

// TestClientIncidentsOfARange: a report lists the incidents unresolved at some
// time in its range — opened before its end, resolved (if at all) after its start —
// oldest first, and none of another range.
func TestClientIncidentsOfARange(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1", "door2")
	c := f.client(t, "door1", "door2")
	f.event(t, "connection_lost", 0, 0, "door1")                  // opens at t0 …
	f.event(t, "connection_lost", 1, time.Minute, "door2")        // open from t0+1m
	f.event(t, "connection_restored", 0, 30*time.Minute, "door1") // … resolved at t0+30m
	f.event(t, "connection_lost", 0, time.Hour, "door1")          // open from t0+1h
	f.intake(t)
	for _, r := range []struct {
		from, to time.Time
		want     []string // opened at, as offsets from t0
	}{
		{t0.Add(-time.Hour), t0, nil},
		{t0, t0.Add(10 * time.Minute), []string{"0s", "1m0s"}},
		{t0.Add(31 * time.Minute), t0.Add(2 * time.Hour), []string{"1m0s", "1h0m0s"}},
		{t0.Add(30 * time.Minute), t0.Add(time.Hour), []string{"1m0s"}}, // resolved at its start: not in it
	} {
		got, err := f.store.ClientIncidents(f.ctx, c.ID, r.from, r.to)
		if err != nil {
			t.Fatal(err)
		}
		var opened []string
		for _, i := range got {
			opened = append(opened, i.OpenedAt.Sub(t0).String())
		}
		if !slices.Equal(opened, r.want) {
			t.Errorf("[%s, %s): incidents opened at %v, want %v", r.from.Sub(t0), r.to.Sub(t0), opened, r.want)
		}
	}
	if got, err := f.store.ClientIncidents(f.ctx, "not-a-uuid", t0, t0.Add(time.Hour)); err != nil || len(got) != 0 {
		t.Errorf("an invalid client id: %v, %v; want none", got, err)
	}
}

// TestRemindersFollowMemberRouting: a member whose routing names another site,
// or only critical when the incident is a warning, hears no reminder and does
// not list the incident; a member routed to the sensor's site does.
func TestRemindersFollowMemberRouting(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1")
	if _, err := f.pg.Pool().Exec(f.ctx, `UPDATE sensors SET site = 'yard' WHERE id = 'door1'`); err != nil {
		t.Fatal(err)
	}
	c := f.client(t, "door1")
	yard, elsewhere, critOnly := f.member(t, c.ID, "yard"), f.member(t, c.ID, "elsewhere"), f.member(t, c.ID, "crit")
	for _, r := range []struct {
		id, sql string
	}{
		{yard.ID, `UPDATE members SET routing_sites = '{yard}' WHERE id = $1`},
		{elsewhere.ID, `UPDATE members SET routing_sites = '{depot}' WHERE id = $1`},
		{critOnly.ID, `UPDATE members SET routing_min_severity = 'critical' WHERE id = $1`},
	} {
		if _, err := f.pg.Pool().Exec(f.ctx, r.sql, r.id); err != nil {
			t.Fatal(err)
		}
	}
	f.policy(t, c.ID, domain.EscalationPolicy{Severities: []string{"critical", "warning"}, RepeatEvery: minutes(5), Loops: 1,
		Tiers: []domain.EscalationTier{{After: 0}}})
	f.event(t, "connection_lost", 1, 0, "door1") // lost while locked: a warning
	f.intake(t)
	f.round(t, 0)
	for _, m := range []struct {
		member registry.Member
		want   int
	}{{yard, 1}, {elsewhere, 0}, {critOnly, 0}} {
		if got := len(f.reminders(t, m.member.ID)); got != m.want {
			t.Errorf("%s: %d reminders, want %d", m.member.Name, got, m.want)
		}
		listed, err := f.store.List(f.ctx, incident.Filter{MemberID: m.member.ID, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(listed) != m.want {
			t.Errorf("%s lists %d incidents, want %d", m.member.Name, len(listed), m.want)
		}
	}
}

// TestPurgeResolved: incidents resolved before the limit go with their
// timeline, oldest first and a batch at a time; one resolved later and an
// open one stay.
func TestPurgeResolved(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "door1", "door2", "door3")
	c := f.client(t, "door1", "door2", "door3")
	f.event(t, "connection_lost", 0, 0, "door1", "door2", "door3")
	f.event(t, "connection_restored", 0, time.Hour, "door1")
	f.event(t, "connection_restored", 0, 3*time.Hour, "door2")
	f.intake(t)
	before := f.incidents(t, c.ID)
	if len(before) != 3 {
		t.Fatalf("%d incidents, want 3", len(before))
	}
	count := func(table string) int {
		var n int
		if err := f.pg.Pool().QueryRow(f.ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	timeline := count("incident_timeline")
	// door1's incident was resolved at t0+1h, door2's at t0+3h: a limit of
	// t0+2h takes door1's only; a batch of 1 at t0+4h then door2's.
	if n, err := f.store.PurgeResolved(f.ctx, t0.Add(2*time.Hour), 10); err != nil || n != 1 {
		t.Fatalf("purged %d %v, want 1", n, err)
	}
	if n, err := f.store.PurgeResolved(f.ctx, t0.Add(4*time.Hour), 1); err != nil || n != 1 {
		t.Fatalf("purged %d %v, want 1", n, err)
	}
	if n, err := f.store.PurgeResolved(f.ctx, t0.Add(400*24*time.Hour), 10); err != nil || n != 0 {
		t.Fatalf("purged %d %v, want 0: the open incident stays", n, err)
	}
	left := f.incidents(t, c.ID)
	if len(left) != 1 || left[0].SensorID != "door3" || left[0].State != "open" {
		t.Fatalf("left %+v, want door3's open incident", left)
	}
	if got := count("incident_timeline"); got >= timeline || got == 0 {
		t.Errorf("timeline rows %d before, %d after: the purged incidents' rows must go, the open one's stay", timeline, got)
	}
}
