package fanout_test

import (
	"testing"
	"time"

	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/storage"
)

// claimTx creates the events' rows with up to max webhooks claimed.
func (f *outboxFixture) claimTx(t *testing.T, max int, events ...storage.NotificationInput) fanout.NotificationsCreated {
	t.Helper()
	created, err := f.store.CreateNotificationsClaiming(f.ctx, events,
		fanout.Claim{Max: max, LeasedUntil: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// byEvent returns the client's deliveries on channel by event id.
func (f *outboxFixture) byEvent(t *testing.T, clientID string, channel storage.Channel) map[string]storage.Delivery {
	t.Helper()
	out := map[string]storage.Delivery{}
	for _, d := range f.deliveries(t, clientID) {
		if d.Channel == channel {
			out[d.EventID] = d
		}
	}
	return out
}

// The fan-out claims, for a sender in its process, only the webhooks a claim
// would take at once, and no more than asked.
func TestCreateNotificationsClaimsWhatAClaimWould(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1", "s2", "s3", "s4", "s5")
	a := f.Client(t, registry.Client{Name: "a", Email: "a@example.com"}, "s1", "s2", "s3", "s4", "s5")
	b := f.Client(t, registry.Client{Name: "disabled"}, "s1")
	if _, err := f.pg.Pool().Exec(f.ctx, `UPDATE clients SET endpoint_disabled_at = now() WHERE id = $1`, b.ID); err != nil {
		t.Fatal(err)
	}

	// s1 alone in the batch: claimed. s2 twice: neither (the claim would take
	// the older first, then the newer). The disabled endpoint's: kept.
	got := f.claimTx(t, 10, stateChanged("e1", "s1", 1, outboxT0),
		stateChanged("e2", "s2", 1, outboxT0), connectionLost("e3", "s2", outboxT0.Add(time.Second)))
	if len(got.Claimed) != 1 {
		t.Fatalf("claimed %+v, want e1's webhook to a alone", got.Claimed)
	}
	c := got.Claimed[0]
	if c.EventID != "e1" || c.ClientID != a.ID || c.Channel != storage.ChannelWebhook || c.State != storage.DeliveryInFlight ||
		c.Attempts != 1 || c.Seq < 1 || c.Data == nil || *c.Data != 1 || c.EventType != "state_changed" || !c.EventAt.Equal(outboxT0) {
		t.Fatalf("claimed delivery = %+v", c)
	}
	if tg, ok := got.ClaimedTargets[c.ID]; !ok || !tg.Owned || !tg.ClientExists || tg.WebhookURL == "" || tg.Secret == "" ||
		tg.SensorAddress != "addr of s1" || tg.EndpointDisabled || len(got.ClaimedTargets) != 1 {
		t.Fatalf("claimed targets = %+v, want e1's, read as DeliveryTargets reads it", got.ClaimedTargets)
	}
	// The handed-over webhook has no delivery row, only its row in flight,
	// which the delivery's readers show as IN_FLIGHT on its first attempt.
	var rows int
	if err := f.pg.Pool().QueryRow(f.ctx, `SELECT count(*) FROM deliveries WHERE id = $1`, c.ID).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("e1's webhook has %d delivery rows (err %v), want none while in flight", rows, err)
	}
	webhooks := f.byEvent(t, a.ID, storage.ChannelWebhook)
	if d := webhooks["e1"]; d.ID != c.ID || d.State != storage.DeliveryInFlight || d.Attempts != 1 || d.LeasedUntil.IsZero() ||
		d.Seq != c.Seq {
		t.Fatalf("listed e1 webhook = %+v, handed over %+v", d, c)
	}
	if d, err := f.pg.GetDelivery(f.ctx, c.ID); err != nil || d.State != storage.DeliveryInFlight || d.Seq != c.Seq || d.EventID != "e1" {
		t.Fatalf("GetDelivery(e1's webhook) = %+v, %v", d, err)
	}
	for _, id := range []string{"e2", "e3"} {
		if d := webhooks[id]; d.State != storage.DeliveryPending || d.Attempts != 0 {
			t.Fatalf("%s webhook = %+v, want PENDING, not claimed", id, d)
		}
	}
	if d := f.byEvent(t, a.ID, storage.ChannelEmail)["e1"]; d.State != storage.DeliveryPending {
		t.Fatalf("e1 email = %+v, want PENDING: only webhooks are claimed", d)
	}
	if d := f.byEvent(t, b.ID, storage.ChannelWebhook)["e1"]; d.State != storage.DeliveryPaused {
		t.Fatalf("disabled endpoint's webhook = %+v, want PAUSED", d)
	}

	// e1 is still open: s1's next waits behind it. Of s3 and s4, only the
	// first in event order fits in Max 1.
	got = f.claimTx(t, 1, connectionLost("e4", "s1", outboxT0.Add(time.Second)),
		connectionLost("e5", "s3", outboxT0.Add(time.Second)), connectionLost("e6", "s4", outboxT0.Add(2*time.Second)))
	if len(got.Claimed) != 1 || got.Claimed[0].EventID != "e5" {
		t.Fatalf("claimed %+v, want e5's webhook alone", got.Claimed)
	}
	webhooks = f.byEvent(t, a.ID, storage.ChannelWebhook)
	if webhooks["e4"].State != storage.DeliveryPending || webhooks["e6"].State != storage.DeliveryPending {
		t.Fatalf("e4 %s, e6 %s, want both PENDING", webhooks["e4"].State, webhooks["e6"].State)
	}
	// No claim asked: nothing claimed.
	if got := f.claimTx(t, 0, connectionLost("e7", "s5", outboxT0)); len(got.Claimed) != 0 {
		t.Fatalf("claimed %+v with Max 0", got.Claimed)
	}
}

// With a sender that also sends emails (Claim.Email), an email a claim would
// take at once is created claimed too: a delivery row IN_FLIGHT on its first
// attempt, under the lease, handed over with its target; an email with an
// older open one of its key is not; and its outcome is recorded on its row.
func TestCreateNotificationsHandsOverEmailsItsSenderSends(t *testing.T) {
	t.Parallel()
	f := newOutboxFixture(t, "s1", "s2")
	a := f.Client(t, registry.Client{Name: "a", Email: "a@example.com"}, "s1", "s2")
	lease := time.Now().Add(time.Minute).Truncate(time.Microsecond)
	claimEmails := func(max int, events ...storage.NotificationInput) fanout.NotificationsCreated {
		t.Helper()
		created, err := f.store.CreateNotificationsClaiming(f.ctx, events, fanout.Claim{Max: max, LeasedUntil: lease, Email: true})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	// An older open email of s2 (not claimed: no sender for it then).
	f.create(t, stateChanged("e0", "s2", 0, outboxT0.Add(-time.Second)))

	got := claimEmails(10, stateChanged("e1", "s1", 1, outboxT0), stateChanged("e2", "s2", 1, outboxT0))
	claimed := map[string]storage.Delivery{}
	for _, d := range got.Claimed {
		claimed[d.EventID+"/"+string(d.Channel)] = d
	}
	email, ok := claimed["e1/email"]
	if len(got.Claimed) != 2 || !ok || claimed["e1/webhook"].ID == "" {
		t.Fatalf("claimed %+v, want e1's webhook and email (e2's wait behind e0's)", got.Claimed)
	}
	if email.State != storage.DeliveryInFlight || email.Attempts != 1 || email.ClientID != a.ID || !email.LeasedUntil.Equal(lease) {
		t.Fatalf("claimed email = %+v", email)
	}
	if tg := got.ClaimedTargets[email.ID]; tg.Email != "a@example.com" || !tg.Owned || !tg.ClientExists {
		t.Fatalf("claimed email's target = %+v", tg)
	}
	// The claimed email is a row IN_FLIGHT under the lease, as a claim leaves one.
	row, err := f.pg.GetDelivery(f.ctx, email.ID)
	if err != nil || row.State != storage.DeliveryInFlight || row.Attempts != 1 || !row.LeasedUntil.Equal(lease) {
		t.Fatalf("email row = %+v, %v; want IN_FLIGHT on attempt 1 until %s", row, err, lease)
	}
	if rows, inFlight := f.rowsOf(t, email.ID); rows != 1 || inFlight != 0 {
		t.Fatalf("claimed email: %d delivery rows, %d in flight; want its row alone", rows, inFlight)
	}
	if d := f.byEvent(t, a.ID, storage.ChannelEmail)["e2"]; d.State != storage.DeliveryPending || d.Attempts != 0 {
		t.Fatalf("e2 email = %+v, want PENDING behind e0's", d)
	}
	done := f.finish(t, storage.DeliveryFinish{ID: email.ID, Attempt: 1, State: storage.DeliverySent, At: outboxT0})
	if d := done[email.ID]; d.State != storage.DeliverySent {
		t.Fatalf("email finished %+v, want SENT", d)
	}
	if row, err := f.pg.GetDelivery(f.ctx, email.ID); err != nil || row.State != storage.DeliverySent {
		t.Fatalf("email row after its outcome = %+v, %v; want SENT", row, err)
	}
	if as := f.attempts(t, email.ID); len(as) != 1 || as[0].Status != storage.DeliverySent {
		t.Fatalf("email's attempts = %+v, want its SENT one", as)
	}
}
