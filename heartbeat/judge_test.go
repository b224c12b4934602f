package heartbeat_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstream/lockstream/consumer"
	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/registry"
)

// setState stores a sensor's state as the consumer would.
func (b *bundle) setState(t *testing.T, sensorID string, data int, at time.Time, offset int64) {
	t.Helper()
	if err := consumer.NewPostgresStore(b.stores.Postgres).ApplyStateChanges(context.Background(), []consumer.StateChange{
		{SensorID: sensorID, Data: data, ChangedAt: at, Offset: offset}}); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) register(t *testing.T, s registry.Sensor) {
	t.Helper()
	s.Address = "Main St 1"
	if _, err := b.stores.Registry.CreateSensor(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// A loss carries the state the sensor was lost in: unlocked is critical, locked
// a warning.
func TestLossWhileUnlockedIsCritical(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.newDaemon(t, nil)
	b.setState(t, "open", 0, b.t0, 1)
	b.setState(t, "shut", 1, b.t0, 2)
	b.record(t, b.tracker, "open", "shut", "never")
	b.advance(4)
	sweep(t, d)
	events := b.published(t)
	got := map[string]event.Event{}
	for _, e := range events {
		got[e.SensorID] = e
	}
	if len(events) != 3 {
		t.Fatalf("published %+v, want three losses", events)
	}
	for id, want := range map[string]event.Severity{"open": event.Critical, "shut": event.Warning, "never": event.Warning} {
		if got[id].Severity != want {
			t.Errorf("loss of %s: %+v, want severity %s", id, got[id], want)
		}
	}
	if got["open"].Data == nil || *got["open"].Data != 0 || got["never"].Data != nil {
		t.Errorf("losses carry %+v and %+v; want open's state 0 and none for never", got["open"], got["never"])
	}
}

// An unlock longer than open_alert_after is reported once per opening, even by
// several daemons; a new opening is reported again; a sensor locked in time,
// or without the setting, never.
func TestOpenTooLongOncePerOpening(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Timeout = time.Hour // no losses in this test
	d1, reg := b.newDaemon(t, nil)
	d2, _ := b.newDaemon(t, nil)
	b.register(t, registry.Sensor{ID: "door", OpenAlertAfter: 5 * time.Second})
	b.register(t, registry.Sensor{ID: "shut", OpenAlertAfter: 5 * time.Second})
	b.register(t, registry.Sensor{ID: "plain"})
	b.setState(t, "door", 0, b.t0, 1)
	b.setState(t, "shut", 0, b.t0, 2)
	b.setState(t, "plain", 0, b.t0, 3)
	b.advance(3)
	b.setState(t, "shut", 1, b.at(3), 4)
	b.advance(4)
	sweep(t, d1)
	if n := len(b.published(t)); n != 0 {
		t.Fatalf("%d events before the alert was due", n)
	}
	b.advance(6)
	sweep(t, d1)
	sweep(t, d2)
	sweep(t, d1)
	events := b.published(t)
	if len(events) != 1 {
		t.Fatalf("published %+v, want one sensor_open_too_long of door", events)
	}
	e := events[0]
	if e.Type != event.SensorOpenTooLong || e.SensorID != "door" || e.Severity != event.Critical ||
		!e.At.Equal(b.at(5)) || e.ID != event.SensorOpenTooLongID("door", b.t0) {
		t.Fatalf("alert = %+v, want door's at t0+5s, critical", e)
	}
	if got := counter(t, reg, "lockstream_heartbeat_open_alerts_total"); got != 1 {
		t.Errorf("open_alerts_total = %v, want 1", got)
	}
	// Locked, then unlocked again: a new opening, a new alert.
	b.setState(t, "door", 1, b.at(7), 5)
	b.setState(t, "door", 0, b.at(8), 6)
	b.advance(14)
	sweep(t, d2)
	sweep(t, d1)
	if events = b.published(t); len(events) != 2 || events[1].ID != event.SensorOpenTooLongID("door", b.at(8)) {
		t.Fatalf("after a second opening: %+v, want a second alert", events)
	}
}

// An unstable sensor quiet for the flap window gets one sensor_stable with its
// final state, even from two daemons; one still changing gets none.
func TestStableAfterQuietWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Timeout = time.Hour
	b.cfg.FlapWindow = 5 * time.Second
	d1, _ := b.newDaemon(t, nil)
	d2, _ := b.newDaemon(t, nil)
	for i, id := range []string{"quiet", "busy"} {
		if err := consumer.NewPostgresStore(b.stores.Postgres).ApplyStateChanges(context.Background(), []consumer.StateChange{{SensorID: id, Data: 0,
			ChangedAt: b.t0, Offset: int64(i), UnstableSince: b.t0.Add(-time.Second)}}); err != nil {
			t.Fatal(err)
		}
	}
	b.advance(3)
	if err := consumer.NewPostgresStore(b.stores.Postgres).ApplyStateChanges(context.Background(), []consumer.StateChange{{SensorID: "busy", Data: 1,
		ChangedAt: b.at(3), Offset: 5, UnstableSince: b.t0.Add(-time.Second)}}); err != nil {
		t.Fatal(err)
	}
	b.advance(6)
	sweep(t, d1)
	sweep(t, d2)
	events := b.published(t)
	if len(events) != 1 || events[0].Type != event.SensorStable || events[0].SensorID != "quiet" ||
		*events[0].Data != 0 || events[0].ID != event.SensorStableID("quiet", b.t0.Add(-time.Second)) || !events[0].At.Equal(b.at(5)) {
		t.Fatalf("published %+v, want quiet's sensor_stable at t0+5s", events)
	}
}
