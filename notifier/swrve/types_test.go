package swrve_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstream/lockstream/event"
	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/notifier/swrve"
	"github.com/lockstream/lockstream/notifier/swrve/swrvetest"
	"github.com/lockstream/lockstream/storage"
)

// Every event type is pushed with its own message prototype (sensor.<type>)
// and a message of its own, not the fallback "Sensor x: <type>": one row per
// event type, and a type without a row fails.
func TestNotificationsEveryEventType(t *testing.T) {
	t.Parallel()
	keys := swrve.PushKeys{}
	for _, typ := range event.Types() {
		keys[swrve.PrototypePrefix+string(typ)] = map[storage.Platform]string{
			storage.PlatformIOS: "campaign-" + string(typ) + "-ios", storage.PlatformAndroid: "campaign-" + string(typ) + "-android",
		}
	}
	f := setup(t, swrvetest.Config{Scale: 0.01}, swrve.Config{PushKeys: keys})
	site := func(n *notifier.Notification) { n.Site, n.Sensors = "Yard B", []string{"s1", "s2", "s3"} }
	cases := []struct {
		typ   event.Type
		setup func(*notifier.Notification)
		want  string
	}{
		{event.StateChanged, nil, "Sensor s1 (Gate) is now unlocked"},
		{event.ConnectionLost, nil, "Critical: Sensor s1 (Gate) lost its connection; last known state: unlocked"},
		{event.ConnectionRestored, nil, "Sensor s1 (Gate) is reporting again; it is unlocked"},
		{event.ConnectionRestored, func(n *notifier.Notification) {
			since := n.At.Add(-(2*time.Hour + 14*time.Minute))
			n.LostSince = &since
		}, "Sensor s1 (Gate) is reporting again after 2 h 14 min; it is unlocked"},
		{event.SensorOpenTooLong, nil, "Critical: Sensor s1 (Gate) has been unlocked for too long"},
		{event.SiteOutage, site, "Site Yard B is out: 3 sensors lost their connection"},
		{event.SiteOutage, func(n *notifier.Notification) { n.Site, n.Sensors = "Shed", []string{"s1"} },
			"Site Shed is out: 1 sensor lost its connection"},
		{event.SiteRestored, site, "Site Yard B is back: most of its sensors report again"},
		{event.MaintenanceEnded, site, "Site Yard B: maintenance ended; 3 sensors went silent during it"},
		{event.MaintenanceEnded, nil, "Sensor s1 (Gate): maintenance ended; no sensor went silent during it"},
		{event.SensorUnstable, nil, "Sensor s1 (Gate) changes too often; its changes are held until it settles"},
		{event.SensorStable, nil, "Sensor s1 (Gate) settled: it is unlocked"},
	}
	covered := map[event.Type]bool{}
	for _, tc := range cases {
		covered[tc.typ] = true
	}
	for _, typ := range event.Types() {
		if !covered[typ] {
			t.Errorf("no case pushes %s", typ)
		}
	}
	target := storage.PushTarget{Platform: storage.PlatformAndroid, PushKey: "device-9"}
	for i, tc := range cases {
		n := notifier.Notification{ID: "n1", EventID: "e1", Type: tc.typ, SensorID: "s1", SensorAddress: "Gate",
			Data: new(0), Previous: new(1), At: time.Now(), Attempt: 1}
		if tc.setup != nil {
			tc.setup(&n)
		}
		n.Severity = event.SeverityOf(tc.typ, n.Data) // as the retrier sets it
		if res := f.sender.Notifications().Send(context.Background(), target, n); res.Outcome != notifier.Sent {
			t.Fatalf("%s: Send = %+v, want Sent", tc.typ, res)
		}
		seen := f.seen()
		if len(seen) != i+1 {
			t.Fatalf("%s: Swrve saw %d requests, want %d", tc.typ, len(seen), i+1)
		}
		want := swrvetest.Request{PushKey: "campaign-" + string(tc.typ) + "-android", User: "device-9", Message: tc.want}
		if got := seen[i]; got != want {
			t.Errorf("%s: Swrve saw %+v, want %+v", tc.typ, got, want)
		}
	}
}
