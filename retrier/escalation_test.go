package retrier_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockstream/lockstream/domain"
	"github.com/lockstream/lockstream/escalation"
	"github.com/lockstream/lockstream/fanout"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/notifier"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
)

// unseenEmails stands in for the email sender of escalations.
type unseenEmails struct {
	mu   sync.Mutex
	sent []notifier.Unseen
	to   []string
}

func (u *unseenEmails) Send(context.Context, string, notifier.Notification) notifier.Result {
	return notifier.Result{Outcome: notifier.Failed, ErrorType: "TEST", Err: errors.New("no sensor email expected")}
}

func (u *unseenEmails) SendUnseen(_ context.Context, to string, e notifier.Unseen) notifier.Result {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.sent, u.to = append(u.sent, e), append(u.to, to)
	return notifier.Result{Outcome: notifier.Sent}
}

// Escalations go out through the usual outbox, and access is checked again
// when they are sent. A round gives each member one email and one push for all
// its due episodes: Ann's lists (and her push names) only the sensor her
// client still watches, the other having been unlinked after the round; Bo,
// deleted after the round, gets nothing (his email is not owned, his push has
// nothing left to say).
func TestEscalationsCheckedWhenSent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noRetrier: true})
	const other = "OtherSensor"
	if _, err := b.registry.CreateSensor(b.ctx, registry.Sensor{ID: other, Address: "2 Side St"}); err != nil {
		t.Fatal(err)
	}
	if err := b.registry.LinkSensor(b.ctx, b.client.ID, other); err != nil {
		t.Fatal(err)
	}
	members := map[string]string{}
	for _, name := range []string{"Ann", "Bo"} {
		hash := sha256.Sum256([]byte("lsm_escalation" + name))
		m, _, err := b.registry.CreateMember(b.ctx, registry.Member{ClientID: b.client.ID, Name: name,
			Email: strings.ToLower(name) + "@example.com", Timezone: "UTC", Preferences: registry.DefaultMemberPreferences(),
			PushTargets: []storage.PushTarget{{Platform: storage.PlatformIOS, PushKey: strings.ToLower(name) + "-phone"}}},
			hash[:], registry.Backfill{})
		if err != nil {
			t.Fatal(err)
		}
		members[name] = m.ID
	}
	one := 1
	if _, err := fanout.NewPostgresStore(b.pg).CreateNotifications(b.ctx, []storage.NotificationInput{
		{EventID: "esc1", Type: "state_changed", SensorID: sensorID, Data: &one, At: time.Now()},
		{EventID: "esc2", Type: "state_changed", SensorID: other, Data: &one, At: time.Now()},
	}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Hour)
	res, err := escalation.NewPostgresStore(b.pg).RunRound(b.ctx, escalation.Round{Now: now, EmailAfter: 15 * time.Minute,
		PushAfter: 2 * time.Minute, Limit: 100})
	if err != nil || res.Episodes != 4 || res.Emails != 2 || res.Pushes != 2 {
		t.Fatalf("round: %+v, %v; want 4 episodes, one email and one push per member", res, err)
	}
	if err := b.registry.UnlinkSensor(b.ctx, b.client.ID, other); err != nil {
		t.Fatal(err)
	}
	if err := b.registry.DeleteMember(b.ctx, members["Bo"]); err != nil {
		t.Fatal(err)
	}
	b.clock.Set(now)
	emails := &unseenEmails{}
	pushes := &pushStub{t: t, now: b.clock.Now, script: []notifier.Result{swrveOK}}
	r, err := retrier.New(b.testConfig(retrier.Config{}), retrier.Deps{Store: b.pg, Attempts: b.stores.ClickHouse,
		Email: emails, Push: noSensorPushes{t}, StandalonePush: pushes}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	b.run(r)

	ds, err := b.pg.ListClientDeliveries(b.ctx, b.client.ID, storage.DeliveryFilter{}, storage.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.EventType != "unseen" {
			continue
		}
		if d.Target == "member:"+members["Ann"] || d.Target == "IOS:ann-phone" {
			b.waitState(d.ID, storage.DeliverySent, 1)
			continue
		}
		got := b.waitState(d.ID, storage.DeliveryFailed, 1)
		want := map[storage.Channel]string{storage.ChannelEmail: "member was deleted", storage.ChannelSwrve: "nothing left unseen"}[d.Channel]
		if !strings.Contains(got.LastError, want) {
			t.Errorf("%s escalation to deleted Bo: %q, want %q", d.Channel, got.LastError, want)
		}
	}
	emails.mu.Lock()
	defer emails.mu.Unlock()
	if len(emails.sent) != 1 || emails.to[0] != "ann@example.com" || len(emails.sent[0].Messages) != 1 ||
		emails.sent[0].Messages[0].SensorID != sensorID || emails.sent[0].MemberName != "Ann" {
		t.Fatalf("escalation emails sent: %+v to %v", emails.sent, emails.to)
	}
	if calls := pushes.sent(); len(calls) != 1 || calls[0].push.PushKey != "ann-phone" ||
		calls[0].push.MessagePrototypeKey != inbox.UnseenPushPrototype ||
		calls[0].push.Message != "You have unseen notifications about sensor "+sensorID {
		t.Fatalf("pushes sent: %+v", calls)
	}
}

// A free-form notification recorded with "email": true mails each addressed
// member that has an address, once, with that one message, even after the
// member has seen it in its inbox; a member without an address gets none.
func TestNotificationEmailsGoOutThroughTheOutbox(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noRetrier: true})
	withMail := sha256.Sum256([]byte("lsm_with_mail"))
	ann, _, err := b.registry.CreateMember(b.ctx, registry.Member{ClientID: b.client.ID, Name: "Ann", Email: "ann@example.com",
		Timezone: "UTC", Preferences: registry.DefaultMemberPreferences()}, withMail[:], registry.Backfill{})
	if err != nil {
		t.Fatal(err)
	}
	noMail := sha256.Sum256([]byte("lsm_no_mail"))
	if _, _, err := b.registry.CreateMember(b.ctx, registry.Member{ClientID: b.client.ID, Name: "Bo",
		Timezone: "UTC", Preferences: registry.DefaultMemberPreferences()}, noMail[:], registry.Backfill{}); err != nil {
		t.Fatal(err)
	}
	rec, err := inbox.NewPostgresStore(b.pg).RecordNotification(b.ctx, inbox.FreeFormNotification{ClientID: b.client.ID, Type: "billing",
		Subject: "Your invoice is ready", Email: true})
	if err != nil || rec.Messages != 2 || rec.Emails != 1 {
		t.Fatalf("recording: %+v, %v; want 2 messages and 1 email", rec, err)
	}
	var annMessage string
	for _, m := range rec.Members {
		if m.MemberID == ann.ID {
			annMessage = m.MessageID
		}
	}
	// Seen before the email goes out: a notification email is sent all the same.
	if n, err := inbox.NewPostgresStore(b.pg).MarkInbox(b.ctx, ann.ID, inbox.ActionSeen, []string{annMessage}, false); err != nil || n != 1 {
		t.Fatalf("marking seen: %d, %v", n, err)
	}
	b.clock.Set(time.Now().Add(time.Minute)) // the deliveries are due
	emails := &unseenEmails{}
	r, err := retrier.New(b.testConfig(retrier.Config{}), retrier.Deps{Store: b.pg, Attempts: b.stores.ClickHouse,
		Email: emails}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	b.run(r)
	ds, err := b.pg.ListClientDeliveries(b.ctx, b.client.ID, storage.DeliveryFilter{}, storage.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var mails []storage.Delivery
	for _, d := range ds {
		if d.Channel == storage.ChannelEmail && d.EventType == "billing" {
			mails = append(mails, d)
		}
	}
	if len(mails) != 1 || mails[0].Target != "member:"+ann.ID {
		t.Fatalf("notification email deliveries: %+v", mails)
	}
	b.waitState(mails[0].ID, storage.DeliverySent, 1)
	emails.mu.Lock()
	defer emails.mu.Unlock()
	if len(emails.sent) != 1 || emails.to[0] != "ann@example.com" || !emails.sent[0].Notification ||
		len(emails.sent[0].Messages) != 1 || emails.sent[0].Messages[0].Subject != "Your invoice is ready" {
		t.Fatalf("emails sent: %+v to %v", emails.sent, emails.to)
	}
}

// A member's quiet hours hold its non-critical email (a free-form
// notification's) until they end, on the retrier's clock, without using up an
// attempt, while an email about a critical message it has not seen goes at
// once. The window is set around the test's clock, so the hour of day the
// test runs at does not matter.
func TestQuietHoursHoldNonCriticalMemberEmails(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noRetrier: true})
	now := time.Now().Add(time.Minute).UTC() // the deliveries are due
	b.clock.Set(now)
	hash := sha256.Sum256([]byte("lsm_quiet"))
	ann, _, err := b.registry.CreateMember(b.ctx, registry.Member{ClientID: b.client.ID, Name: "Ann", Email: "ann@example.com",
		Timezone: "UTC", Preferences: registry.DefaultMemberPreferences()}, hash[:], registry.Backfill{})
	if err != nil {
		t.Fatal(err)
	}
	quiet := domain.QuietHours{From: now.Add(-time.Hour).Format("15:04"), To: now.Add(time.Hour).Format("15:04")}
	if _, err := b.registry.UpdateMember(b.ctx, ann.ID, registry.MemberUpdate{QuietHours: &quiet}); err != nil {
		t.Fatal(err)
	}
	// A critical message about the sensor (lost while unlocked), and an
	// escalation email about it as the escalation round queues one.
	unlocked := 0
	if _, err := fanout.NewPostgresStore(b.pg).CreateNotifications(b.ctx, []storage.NotificationInput{{EventID: "lost", Type: "connection_lost",
		SensorID: sensorID, Data: &unlocked, At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	var critical string
	if err := b.pg.Pool().QueryRow(b.ctx, `
		INSERT INTO deliveries (id, client_id, sensor_id, event_type, channel, target, state, next_attempt_at, event_at)
		VALUES (gen_random_uuid(), $1, $2, 'unseen', 'email', 'member:' || $3, 'PENDING', now(), now())
		RETURNING id::text`, b.client.ID, sensorID, ann.ID).Scan(&critical); err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.NewPostgresStore(b.pg).RecordNotification(b.ctx, inbox.FreeFormNotification{MemberID: ann.ID, Type: "billing",
		Subject: "Your invoice is ready", Email: true}); err != nil {
		t.Fatal(err)
	}
	ds, err := b.pg.ListClientDeliveries(b.ctx, b.client.ID, storage.DeliveryFilter{}, storage.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var billing string
	for _, d := range ds {
		if d.EventType == "billing" {
			billing = d.ID
		}
	}
	emails := &unseenEmails{}
	r, err := retrier.New(b.testConfig(retrier.Config{}), retrier.Deps{Store: b.pg, Attempts: b.stores.ClickHouse,
		Email: emails}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	b.run(r)

	b.waitState(critical, storage.DeliverySent, 1)
	held := b.waitState(billing, storage.DeliveryRetry, 0)
	if end := now.Add(time.Hour).Truncate(time.Minute); !held.NextAttemptAt.Equal(end) ||
		!strings.Contains(held.LastError, "quiet hours") {
		t.Fatalf("held email: due %v (%q), want due at the end of the quiet hours, %v", held.NextAttemptAt, held.LastError, end)
	}
	b.clock.Set(held.NextAttemptAt)
	b.waitState(billing, storage.DeliverySent, 1)
	emails.mu.Lock()
	defer emails.mu.Unlock()
	if len(emails.sent) != 2 {
		t.Fatalf("emails sent: %+v", emails.sent)
	}
}
