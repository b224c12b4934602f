package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

func TestCreatePushIsDurableAndScheduled(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	pg, ctx := stores.Postgres, context.Background()
	received := time.Now().UTC().Truncate(time.Microsecond)

	now, err := pg.CreatePush(ctx, storage.PushRequest{Platform: storage.PlatformIOS, MessagePrototypeKey: "Hello",
		PushKey: "device-1", Message: "hi", ReceivedAt: received, WindowAt: received})
	if err != nil {
		t.Fatal(err)
	}
	window := received.Add(time.Hour)
	later, err := pg.CreatePush(ctx, storage.PushRequest{Platform: storage.PlatformAndroid, MessagePrototypeKey: "Hello",
		PushKey: "device-2", Message: "later", CronExpression: "0 0 * * * *", ReceivedAt: received, WindowAt: window})
	if err != nil {
		t.Fatal(err)
	}

	// What GetPush reads back is what was stored, with the delivery's state.
	got, err := pg.GetPush(ctx, now.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != storage.DeliveryPending || !got.NextAttemptAt.Equal(received) || got.Channel != storage.ChannelSwrve ||
		got.Target != "IOS:device-1" || got.Platform != storage.PlatformIOS || got.MessagePrototypeKey != "Hello" ||
		got.PushKey != "device-1" || got.Message != "hi" || got.CronExpression != "" || got.NotificationID != "" ||
		!got.ReceivedAt.Equal(received) || !got.EventAt.Equal(received) || got.Attempts != 0 {
		t.Fatalf("immediate push = %+v", got)
	}
	got, err = pg.GetPush(ctx, later.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != storage.DeliveryScheduled || !got.NextAttemptAt.Equal(window) || !got.WindowAt.Equal(window) ||
		got.CronExpression != "0 0 * * * *" || got.Target != "ANDROID:device-2" {
		t.Fatalf("scheduled push = %+v", got)
	}

	// Before the window only the immediate push is due; at the window the
	// scheduled one is claimed like a PENDING delivery.
	claimed, err := pg.ClaimDeliveries(ctx, received.Add(time.Minute), 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 1 || claimed[0].ID != now.ID || claimed[0].State != storage.DeliveryInFlight {
		t.Fatalf("claimed before the window: %+v", claimed)
	}
	claimed, err = pg.ClaimDeliveries(ctx, window, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 1 || claimed[0].ID != later.ID {
		t.Fatalf("claimed at the window: %+v", claimed)
	}

	// The retrier reads both requests in one call; other ids are left out.
	reqs, err := pg.PushRequests(ctx, []string{now.ID, later.ID, "not-a-uuid", "0191e7a4-0000-7000-8000-000000000000"})
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[now.ID].Message != "hi" || reqs[later.ID].PushKey != "device-2" ||
		reqs[later.ID].Platform != storage.PlatformAndroid || !reqs[later.ID].WindowAt.Equal(window) {
		t.Fatalf("push requests = %+v", reqs)
	}
}

func TestGetPushNotFound(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	pg, ctx := stores.Postgres, context.Background()
	for _, id := range []string{"nope", "0191e7a4-0000-7000-8000-000000000000"} {
		if _, err := pg.GetPush(ctx, id); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("GetPush(%q) = %v, want ErrNotFound", id, err)
		}
	}
	// A delivery of a sensor event is not a push.
	if _, err := registry.New(pg).CreateSensor(ctx, registry.Sensor{ID: "s1", Address: "a"}); err != nil {
		t.Fatal(err)
	}
	c, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "c", WebhookURL: "https://example.com/h", Secret: "whsec_x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := registry.New(pg).LinkSensor(ctx, c.ID, "s1"); err != nil {
		t.Fatal(err)
	}
	data := 1
	if _, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, []storage.NotificationInput{{EventID: "e1", Type: "state_changed",
		SensorID: "s1", Data: &data, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	ds, err := pg.ListClientDeliveries(ctx, c.ID, storage.DeliveryFilter{}, storage.Page{Limit: 10})
	if err != nil || len(ds) != 1 {
		t.Fatalf("deliveries = %v, %v", ds, err)
	}
	if _, err := pg.GetPush(ctx, ds[0].ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("GetPush(webhook delivery) = %v, want ErrNotFound", err)
	}
}

func TestCreatePushRefusesIncompleteRequests(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	pg, ctx := stores.Postgres, context.Background()
	at := time.Now()
	valid := storage.PushRequest{Platform: storage.PlatformIOS, MessagePrototypeKey: "Hello", PushKey: "d",
		Message: "m", ReceivedAt: at, WindowAt: at}
	for name, mutate := range map[string]func(*storage.PushRequest){
		"platform":  func(r *storage.PushRequest) { r.Platform = "WINDOWS" },
		"prototype": func(r *storage.PushRequest) { r.MessagePrototypeKey = "" },
		"push key":  func(r *storage.PushRequest) { r.PushKey = "" },
		"message":   func(r *storage.PushRequest) { r.Message = "" },
		"window":    func(r *storage.PushRequest) { r.WindowAt = time.Time{} },
	} {
		req := valid
		mutate(&req)
		if p, err := pg.CreatePush(ctx, req); err == nil {
			t.Errorf("%s: CreatePush = %+v, want an error", name, p)
		}
	}
	// Nothing half-written was left behind.
	stats, err := pg.OutboxStats(ctx, at.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for state, n := range stats.Depth {
		if n != 0 {
			t.Fatalf("%d %s deliveries after refused pushes", n, state)
		}
	}
}
