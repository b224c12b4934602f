package maintain_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/maintain"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func TestParseRetention(t *testing.T) {
	for in, want := range map[string]time.Duration{"90d": 90 * 24 * time.Hour, "0": 0, "36h": 36 * time.Hour, "0d": 0} {
		if got, err := maintain.ParseRetention(in); err != nil || got != want {
			t.Errorf("ParseRetention(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1d", "1.5d"} {
		if _, err := maintain.ParseRetention(bad); err == nil {
			t.Errorf("ParseRetention(%q) accepted", bad)
		}
	}
}

// TestMaintainWalksThroughMonths moves the clock over half a year: partitions
// are made ahead; a month past the retention is dropped whole, in every table;
// a month holding an open delivery is kept, reported and counted until the
// delivery is finished; ClickHouse months past the history retention go.
func TestMaintainWalksThroughMonths(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	pg, ctx := stores.Postgres, context.Background()
	if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: "s1", Address: "1 Street"}); err != nil {
		t.Fatal(err)
	}
	c, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := registry.New(pg).LinkSensor(ctx, c.ID, "s1"); err != nil {
		t.Fatal(err)
	}

	now := t0
	reg := prometheus.NewRegistry()
	mt, err := maintain.New(maintain.Config{Retention: 90 * 24 * time.Hour, HistoryRetention: 60 * 24 * time.Hour,
		Now: func() time.Time { return now }}, maintain.NewPostgresStore(pg), maintain.NewClickHouseStore(stores.ClickHouse), reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	pass := func() maintain.Report {
		t.Helper()
		rep, err := mt.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	pass() // November and the three months after it exist now

	// A November delivery, SENT; a December one left PENDING (open).
	event := func(id string, at time.Time) {
		t.Helper()
		one := 1
		if _, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, []storage.NotificationInput{{EventID: id, Type: "connection_lost",
			SensorID: "s1", Data: &one, At: at}}); err != nil {
			t.Fatal(err)
		}
	}
	event("nov", t0)
	claimed, err := pg.ClaimDeliveries(ctx, time.Now().Add(time.Minute), 10, time.Hour)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claimed %v, %v", claimed, err)
	}
	nov := claimed[0]
	if err := storagetest.CompleteDelivery(ctx, pg, nov.ID, 1, 200); err != nil {
		t.Fatal(err)
	}
	event("dec", time.Date(2026, 12, 10, 0, 0, 0, 0, time.UTC))
	decs, err := pg.ListClientDeliveries(ctx, c.ID, storage.DeliveryFilter{State: storage.DeliveryPending}, storage.Page{Limit: 10})
	if err != nil || len(decs) != 1 {
		t.Fatalf("pending deliveries %v, %v", decs, err)
	}
	dec := decs[0]
	if err := stores.ClickHouse.InsertDeliveryAttempts(ctx, []storage.DeliveryAttempt{
		{ID: 1, DeliveryID: nov.ID, Channel: storage.ChannelWebhook, Attempt: 1, Status: storage.DeliverySent, At: t0},
		{ID: 2, DeliveryID: "later", Channel: storage.ChannelWebhook, Attempt: 1, Status: storage.DeliverySent,
			At: time.Date(2027, 4, 1, 0, 0, 0, 0, time.UTC)},
	}); err != nil {
		t.Fatal(err)
	}

	// Mid-May 2027, 90 days' retention: November and January are past it and
	// dropped; December is past it too but holds the open delivery.
	now = time.Date(2027, 5, 15, 0, 0, 0, 0, time.UTC)
	rep := pass()
	for _, want := range []string{"deliveries_202705", "deliveries_202708", "notifications_202708", "pushes_202708", "delivery_attempts_202708"} {
		if !slices.Contains(rep.Created, want) {
			t.Errorf("created %v, want %s among them", rep.Created, want)
		}
	}
	for _, want := range []string{"notifications_202611", "deliveries_202611", "pushes_202611", "delivery_attempts_202611", "deliveries_202701"} {
		if !slices.Contains(rep.Dropped, want) {
			t.Errorf("dropped %v, want %s among them", rep.Dropped, want)
		}
	}
	for _, want := range []string{"notifications_202612", "deliveries_202612", "pushes_202612"} {
		if !slices.Contains(rep.Kept, want) || slices.Contains(rep.Dropped, want) {
			t.Errorf("kept %v, dropped %v; want %s kept", rep.Kept, rep.Dropped, want)
		}
	}
	if got := gaugeValue(t, reg, "lockstream_maintain_partitions_kept_open"); got != float64(len(rep.Kept)) || got == 0 {
		t.Errorf("kept gauge = %v, want %d", got, len(rep.Kept))
	}
	if _, err := pg.GetDelivery(ctx, nov.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("November's delivery after its month was dropped: %v, want not found", err)
	}
	if got, err := pg.GetDelivery(ctx, dec.ID); err != nil || got.State != storage.DeliveryPending {
		t.Errorf("December's open delivery = %+v, %v; want it kept, PENDING", got, err)
	}
	if !slices.Equal(rep.HistoryDropped, []string{"delivery_attempts/202611"}) {
		t.Errorf("history dropped %v, want delivery_attempts/202611 only", rep.HistoryDropped)
	}
	if left, err := stores.ClickHouse.DeliveryAttempts(ctx, "later"); err != nil || len(left) != 1 {
		t.Errorf("April's attempt in ClickHouse: %v, %v; want kept", left, err)
	}

	// The delivery is sent at last: December goes at the next pass.
	claimed, err = pg.ClaimDeliveries(ctx, time.Now().Add(time.Minute), 10, time.Hour)
	if err != nil || len(claimed) != 1 || claimed[0].ID != dec.ID {
		t.Fatalf("claimed %v, %v", claimed, err)
	}
	if err := storagetest.CompleteDelivery(ctx, pg, dec.ID, 1, 200); err != nil {
		t.Fatal(err)
	}
	rep = pass()
	if len(rep.Kept) != 0 || !slices.Contains(rep.Dropped, "deliveries_202612") || !slices.Contains(rep.Dropped, "notifications_202612") {
		t.Errorf("after the delivery was sent: kept %v, dropped %v; want December dropped", rep.Kept, rep.Dropped)
	}
	if got := gaugeValue(t, reg, "lockstream_maintain_partitions_kept_open"); got != 0 {
		t.Errorf("kept gauge = %v, want 0", got)
	}
	// The fan-out still works in the months made ahead.
	event("jun", time.Date(2027, 6, 2, 0, 0, 0, 0, time.UTC))
}

// gaugeValue reads the registered gauge named name.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestMaintainExpiresNotificationKeys: a notification's idempotency key
// outlives a pass within the retention (a copy is still a duplicate) and is
// deleted by the first pass past it (a copy is recorded again).
func TestMaintainExpiresNotificationKeys(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	pg, ctx := stores.Postgres, context.Background()
	c, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	n := inbox.FreeFormNotification{ClientID: c.ID, Type: "billing", Subject: "invoice", Key: "amqp-id:inv-1"}
	if r, err := inbox.NewPostgresStore(pg).RecordNotification(ctx, n); err != nil || r.Duplicate {
		t.Fatalf("recording: %+v, %v", r, err)
	}
	now := time.Now() // the keys' time is Postgres's: this machine's clock
	reg := prometheus.NewRegistry()
	// No partitioned tables: a clock months ahead would drop the partition
	// this test's copies are written to.
	mt, err := maintain.New(maintain.Config{Retention: 90 * 24 * time.Hour, Tables: []string{},
		Now: func() time.Time { return now }}, maintain.NewPostgresStore(pg), nil, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		after     time.Duration
		deleted   int64
		duplicate bool
	}{
		{89 * 24 * time.Hour, 0, true},
		{91 * 24 * time.Hour, 1, false},
	} {
		now = time.Now().Add(step.after)
		rep, err := mt.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := inbox.NewPostgresStore(pg).RecordNotification(ctx, n)
		if err != nil || rep.KeysDeleted != step.deleted || r.Duplicate != step.duplicate {
			t.Errorf("%v on: deleted %d keys, a copy recorded %+v (%v); want %d deleted, duplicate %v",
				step.after, rep.KeysDeleted, r, err, step.deleted, step.duplicate)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if got := f.GetMetric()[0].GetCounter().GetValue(); f.GetName() == "lockstream_maintain_notification_keys_deleted_total" && got != 1 {
			t.Errorf("keys deleted counter %v, want 1", got)
		}
	}
}
