package escalation_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockstream/lockstream/escalation"
)

// dueEpisodes makes members × sensors due episodes (one flip per sensor, every
// member of one client) and returns the fixture.
func dueEpisodes(t *testing.T, members, sensors int) *fixture {
	t.Helper()
	ids := make([]string, sensors)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
	}
	f := newFixture(t)
	if err := f.reg.CreateSensors(f.ctx, ids, "somewhere"); err != nil {
		t.Fatal(err)
	}
	c := f.client(t, ids...)
	for i := range members {
		f.member(t, c.ID, fmt.Sprintf("m%d", i), nil)
	}
	f.flip(t, "state_changed", 1, ids...)
	return f
}

// A round issues the same statements whether one episode is due or 10,000
// (100 members × 100 sensors), counted on the wire by a pgx tracer.
func TestRoundStatementsDoNotGrow(t *testing.T) {
	t.Parallel()
	count := func(members, sensors int) (int64, escalation.Result) {
		f := dueEpisodes(t, members, sensors)
		now := time.Now().Add(time.Hour)
		e := f.escalator(t, &now)
		before := f.count.Count()
		res := f.round(t, e)
		return f.count.Count() - before, res
	}
	one, res1 := count(1, 1)
	many, resMany := count(100, 100)
	if res1.Episodes != 1 || res1.Emails != 1 || res1.Pushes != 1 {
		t.Fatalf("one episode: %+v", res1)
	}
	if resMany.Episodes != 10000 || resMany.Emails != 100 || resMany.Pushes != 100 {
		t.Fatalf("10,000 episodes: %+v, want one email and one push per member", resMany)
	}
	if one != many || one != int64(res1.Statements) || many != int64(resMany.Statements) {
		t.Fatalf("statements: %d for 1 due episode, %d for 10,000 (the round reports %d and %d)",
			one, many, res1.Statements, resMany.Statements)
	}
	t.Logf("a round: %d statements for 1 and for 10,000 due episodes", one)
}
