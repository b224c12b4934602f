package fanout_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
)

// The fan-out's statements (PostgresStore), on their own: who gets what.
// These tests moved here from storage with the statements.

// outboxFixture is a migrated store with one sensor per id and clients linked to
// them, and the fan-out's store on it.
type outboxFixture struct {
	*storagetest.Fleet
	pg    *storage.Postgres
	store *fanout.PostgresStore
	// reg is the registry on pg: the sensors, clients and members the
	// fan-out's statements read.
	reg *registry.Store
	ctx context.Context
}

func newOutboxFixture(t *testing.T, sensors ...string) *outboxFixture {
	t.Helper()
	fleet := storagetest.NewFleet(t, sensors...)
	return &outboxFixture{Fleet: fleet, pg: fleet.Postgres, store: fanout.NewPostgresStore(fleet.Postgres),
		reg: fleet.Registry, ctx: fleet.Ctx}
}

func (f *outboxFixture) create(t *testing.T, events ...storage.NotificationInput) fanout.NotificationsCreated {
	t.Helper()
	created, err := f.store.CreateNotifications(f.ctx, events)
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// deliveries returns every delivery of the client, in creation order.
func (f *outboxFixture) deliveries(t *testing.T, clientID string) []storage.Delivery {
	t.Helper()
	ds, err := f.pg.ListClientDeliveries(f.ctx, clientID, storage.DeliveryFilter{}, storage.Page{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func (f *outboxFixture) claim(t *testing.T, now time.Time, limit int) []storage.Delivery {
	t.Helper()
	ds, err := f.pg.ClaimDeliveries(f.ctx, now, limit, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

var outboxT0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func stateChanged(id, sensor string, data int, at time.Time) storage.NotificationInput {
	prev := 1 - data
	return storage.NotificationInput{EventID: id, Type: "state_changed", SensorID: sensor, Data: &data, Previous: &prev, At: at}
}

func connectionLost(id, sensor string, at time.Time) storage.NotificationInput {
	return storage.NotificationInput{EventID: id, Type: "connection_lost", SensorID: sensor, At: at}
}

// later is a claim time after everything the tests create is due.
func later() time.Time { return time.Now().Add(time.Minute) }

func TestCreateNotificationsFansOutIdempotently(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1", "s2")
	full := f.Client(t, registry.Client{Name: "full", Email: "a@example.com", PushTargets: []storage.PushTarget{
		{Platform: storage.PlatformIOS, PushKey: "k1"}, {Platform: storage.PlatformAndroid, PushKey: "k2"},
	}}, "s1")
	plain := f.Client(t, registry.Client{Name: "plain"}, "s1", "s2")
	f.Client(t, registry.Client{Name: "unlinked"})

	events := []storage.NotificationInput{
		stateChanged("e1", "s1", 1, outboxT0),
		{EventID: "e2", Type: "connection_lost", SensorID: "s2", At: outboxT0.Add(time.Second)},
		{EventID: "e3", Type: "connection_lost", SensorID: "unregistered", At: outboxT0},
		stateChanged("e1", "s1", 1, outboxT0), // repeated within the batch
	}
	got := f.create(t, events...)
	// e1 → full and plain, e2 → plain: 3 notifications; webhooks 3, email 1, swrve 2.
	if got.Notifications != 3 || got.Deliveries[storage.ChannelWebhook] != 3 ||
		got.Deliveries[storage.ChannelEmail] != 1 || got.Deliveries[storage.ChannelSwrve] != 2 {
		t.Fatalf("first fan-out = %+v", got)
	}
	again := f.create(t, events...)
	if again.Notifications != 0 || len(again.Deliveries) != 0 {
		t.Fatalf("replayed fan-out created %+v, want nothing", again)
	}

	fullDs := f.deliveries(t, full.ID)
	var targets []string
	for _, d := range fullDs {
		if d.State != storage.DeliveryPending || d.EventID != "e1" || d.SensorID != "s1" || d.EventType != "state_changed" ||
			d.Data == nil || *d.Data != 1 || d.Previous == nil || *d.Previous != 0 || !d.EventAt.Equal(outboxT0) {
			t.Errorf("delivery of full client = %+v", d)
		}
		targets = append(targets, string(d.Channel)+"/"+d.Target)
	}
	sort.Strings(targets)
	want := []string{"email/", "swrve/ANDROID:k2", "swrve/IOS:k1", "webhook/"}
	if fmt.Sprint(targets) != fmt.Sprint(want) {
		t.Fatalf("channels of full client = %v, want %v", targets, want)
	}
	plainDs := f.deliveries(t, plain.ID)
	if len(plainDs) != 2 {
		t.Fatalf("plain client has %d deliveries, want 2 webhooks", len(plainDs))
	}
	for _, d := range plainDs {
		if d.Channel != storage.ChannelWebhook || d.Target != "" {
			t.Errorf("plain client delivery = %+v", d)
		}
	}
}

func TestCreateNotificationsSupersedesOlderStates(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1")
	c := f.Client(t, registry.Client{Name: "c", Email: "c@example.com"}, "s1")

	// Two flips in one batch: the older is superseded at once.
	f.create(t, stateChanged("a1", "s1", 1, outboxT0), stateChanged("a2", "s1", 0, outboxT0.Add(time.Second)))
	// A loss is never superseded.
	f.create(t, storage.NotificationInput{EventID: "a3", Type: "connection_lost", SensorID: "s1", At: outboxT0.Add(2 * time.Second)})
	states := func() map[string]storage.DeliveryState {
		out := map[string]storage.DeliveryState{}
		for _, d := range f.deliveries(t, c.ID) {
			out[d.EventID+"/"+string(d.Channel)] = d.State
		}
		return out
	}
	want := map[string]storage.DeliveryState{
		"a1/webhook": storage.DeliverySuperseded, "a1/email": storage.DeliverySuperseded,
		"a2/webhook": storage.DeliveryPending, "a2/email": storage.DeliveryPending,
		"a3/webhook": storage.DeliveryPending, "a3/email": storage.DeliveryPending,
	}
	if got := states(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after first batches: %v, want %v", got, want)
	}

	// a2's webhook is being sent: a newer flip leaves it alone, supersedes its email.
	claimed := f.claim(t, later(), 10)
	if len(claimed) != 2 {
		t.Fatalf("claimed %d deliveries, want a2's two (a3 waits behind them)", len(claimed))
	}
	var inFlight storage.Delivery
	for _, d := range claimed {
		if d.EventID != "a2" {
			t.Fatalf("claimed %s, want only a2", d.EventID)
		}
		if d.Channel == storage.ChannelEmail {
			// Put the email back to RETRY so it is supersedable.
			if _, err := storagetest.RescheduleDelivery(f.ctx, f.pg, d.ID, d.Attempts, later(), "try later", 503); err != nil {
				t.Fatal(err)
			}
		} else {
			inFlight = d
		}
	}
	got := f.create(t, stateChanged("a4", "s1", 1, outboxT0.Add(3*time.Second)))
	if got.Superseded[storage.ChannelEmail] != 1 || got.Superseded[storage.ChannelWebhook] != 0 {
		t.Fatalf("superseded = %v, want a2's email only", got.Superseded)
	}
	want["a2/email"] = storage.DeliverySuperseded
	want["a2/webhook"] = storage.DeliveryInFlight
	want["a4/webhook"], want["a4/email"] = storage.DeliveryPending, storage.DeliveryPending
	if got := states(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after a4: %v, want %v", got, want)
	}

	// The in-flight one fails retryably: with a4 waiting it is superseded, not retried.
	state, err := storagetest.RescheduleDelivery(f.ctx, f.pg, inFlight.ID, inFlight.Attempts, later(), "503", 503)
	if err != nil {
		t.Fatal(err)
	}
	if state != storage.DeliverySuperseded {
		t.Fatalf("retry of an older in-flight state became %s, want SUPERSEDED", state)
	}
}

// A client subscribed to connection_lost only gets no notification (on any
// channel, nor in its members' inboxes) of a state change, and the filtered
// pair is counted; a client of every type gets both.
func TestCreateNotificationsFiltersBySubscription(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "subDoor")
	lossOnly := f.Client(t, registry.Client{Name: "loss only", Email: "ops@example.com",
		EventTypes: []string{"connection_lost"}}, "subDoor")
	all := f.Client(t, registry.Client{Name: "all"}, "subDoor")

	created := f.create(t, stateChanged("sc1", "subDoor", 1, outboxT0))
	if created.Filtered != 1 || created.Notifications != 1 {
		t.Fatalf("state change: %+v, want 1 notification and 1 filtered", created)
	}
	created = f.create(t, connectionLost("cl1", "subDoor", outboxT0.Add(time.Second)))
	if created.Filtered != 0 || created.Notifications != 2 {
		t.Fatalf("connection lost: %+v, want 2 notifications and none filtered", created)
	}
	types := map[string]bool{}
	for _, d := range f.deliveries(t, lossOnly.ID) {
		types[string(d.Channel)+":"+d.EventType] = true
	}
	if len(types) != 2 || !types["webhook:connection_lost"] || !types["email:connection_lost"] {
		t.Errorf("loss-only client's deliveries: %v, want the loss on webhook and email only", types)
	}
	if n := len(f.deliveries(t, all.ID)); n != 2 {
		t.Errorf("client of every type has %d deliveries, want 2", n)
	}

	// Subscribing to every type again (nil) lets state changes through.
	everything := []string(nil)
	if _, err := f.reg.UpdateClient(f.ctx, lossOnly.ID, registry.ClientUpdate{EventTypes: &everything}); err != nil {
		t.Fatal(err)
	}
	if created = f.create(t, stateChanged("sc2", "subDoor", 0, outboxT0.Add(2*time.Second))); created.Filtered != 0 || created.Notifications != 2 {
		t.Fatalf("after resubscribing: %+v, want 2 notifications", created)
	}
}

// TestLargeInsertAnalyzesTheOutboxMonth creates OutboxAnalyzeRows deliveries
// through CreateNotifications, as the fan-out does in a burst, and checks that
// it names their month as due, and that analyzing it (the fan-out does, off
// its writer's path) gives the month partitions statistics (pg_class.reltuples
// is -1 for a table never analyzed) without waiting for autovacuum.
func TestLargeInsertAnalyzesTheOutboxMonth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := storagetest.New(t)
	pg := stores.Postgres
	n := fanout.OutboxAnalyzeRows
	ids := make([]string, n)
	events := make([]storage.NotificationInput, n)
	at := time.Now().UTC()
	for i := range ids {
		ids[i] = fmt.Sprintf("an%d", i)
		data, prev := 1, 0
		events[i] = storage.NotificationInput{EventID: fmt.Sprintf("ev-%d", i), Type: "state_changed", SensorID: ids[i],
			Data: &data, Previous: &prev, At: at}
	}
	if err := registry.New(pg).CreateSensors(ctx, ids, "x"); err != nil {
		t.Fatal(err)
	}
	c, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "c", WebhookURL: "http://127.0.0.1:1/", Secret: "whsec_x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := registry.New(pg).LinkSensors(ctx, c.ID, ids); err != nil {
		t.Fatal(err)
	}
	created, err := fanout.NewPostgresStore(pg).CreateNotifications(ctx, events)
	if err != nil {
		t.Fatal(err)
	}
	month := at.Format("200601")
	if len(created.AnalyzeDue) != 1 || created.AnalyzeDue[0] != month {
		t.Fatalf("analyze due %v, want [%s]", created.AnalyzeDue, month)
	}
	if err := pg.AnalyzeOutboxMonth(ctx, month); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, stores.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, table := range []string{"deliveries_" + month, "notifications_" + month} {
		var tuples float64
		if err := conn.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, table).Scan(&tuples); err != nil {
			t.Fatal(err)
		}
		if tuples < float64(n)/2 {
			t.Errorf("%s: reltuples %v after %d deliveries, want statistics of them", table, tuples, n)
		}
	}
}
