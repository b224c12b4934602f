package consumer

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
)

// A sensor flipping 10 times within seconds: the first 6 changes are
// delivered, the 7th starts a streak (sensor_unstable) and is held with the
// rest; the next change after a quiet window ends the streak (sensor_stable
// with the state before it) and is delivered.
func TestJudgeFlapping(t *testing.T) {
	t.Parallel()
	w := &worker{c: &Consumer{cfg: Config{FlapChanges: 6, FlapWindow: time.Minute}}}
	s := &cached{}
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	change := func(at time.Time, data int) []event.Event {
		d := data
		events := w.judgeFlapping(s, event.Event{ID: fmt.Sprint(at.UnixNano()), Type: event.StateChanged, SensorID: "fx",
			Data: &d, At: at}, nil)
		s.known, s.data, s.changedAt = true, int8(data), at.UnixNano()
		return events
	}
	var kinds []string
	for i := range 10 {
		for _, e := range change(t0.Add(time.Duration(i)*500*time.Millisecond), (i+1)%2) {
			kinds = append(kinds, fmt.Sprintf("%s/%v", e.Type, e.Held))
		}
	}
	want := "[state_changed/false state_changed/false state_changed/false state_changed/false state_changed/false " +
		"state_changed/false state_changed/true sensor_unstable/false state_changed/true state_changed/true state_changed/true]"
	if fmt.Sprint(kinds) != want {
		t.Fatalf("events %v\nwant   %v", kinds, want)
	}
	since := t0.Add(6 * 500 * time.Millisecond)
	if s.unstableSince != since.UnixNano() {
		t.Fatalf("unstable since %v, want the 7th change's time", time.Unix(0, s.unstableSince))
	}
	// Quiet for a window, then a change: the streak ends with the last state.
	events := change(t0.Add(2*time.Minute), 1)
	if len(events) != 2 || events[0].Type != event.SensorStable || *events[0].Data != 0 ||
		events[0].ID != event.SensorStableID("fx", since) || events[1].Held {
		t.Fatalf("after a quiet window: %+v", events)
	}
	if s.unstableSince != 0 {
		t.Fatal("still unstable after the streak ended")
	}
}
