package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/lockstream/lockstream/bridge"
	"github.com/lockstream/lockstream/bridge/amqp"
	"github.com/lockstream/lockstream/bridge/bridgetest"
	"github.com/lockstream/lockstream/inbox"
	"github.com/lockstream/lockstream/notifier/email"
	"github.com/lockstream/lockstream/registry"
	"github.com/lockstream/lockstream/retrier"
	"github.com/lockstream/lockstream/storage"
	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// TestNotificationsReachTheInbox: a free-form notification published as
// events.notification.update.<type> reaches the addressed member's inbox in
// Postgres; one for a member that does not exist, and one that is not a
// notification, are acknowledged and kept in the DLQ with their reason, and
// never hold up the good one.
func TestNotificationsReachTheInbox(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	ctx := context.Background()
	client, err := stores.Registry.CreateClient(ctx, registry.Client{Name: "acme", WebhookURL: "https://example.com/h", Secret: "whsec_x"})
	if err != nil {
		t.Fatal(err)
	}
	member, _, err := stores.Registry.CreateMember(ctx, registry.Member{ClientID: client.ID, Name: "Alice",
		Timezone: "UTC", Preferences: registry.DefaultMemberPreferences()}, []byte("alice-token-hash"), registry.Backfill{})
	if err != nil {
		t.Fatal(err)
	}
	kafka := streamtest.Config(t, 3)
	b := setup(t, kafka, amqp.InboxRecorder{Store: inbox.NewPostgresStore(stores.Postgres)}, nil, nil)

	b.pub.Publish("events.notification.update.upload", []byte(`{"member_id":"01a20a61-8608-7732-b6ee-92df4cb0788b","subject":"lost"}`))
	b.pub.Publish("events.notification.update.upload", []byte(`{"member_id":`))
	b.pub.Publish("events.notification.update.upload", []byte(fmt.Sprintf(`{"member_id":%q,"subject":"Upload done","message":{"file":"a.txt"}}`, member.ID)))

	bridgetest.WaitFor(t, wait, "the notification in the member's inbox", func() (bool, string) {
		total, msgs, err := inbox.NewPostgresStore(stores.Postgres).ListInbox(ctx, inbox.Query{MemberID: member.ID, Sort: inbox.SortTimestamp, Limit: 10})
		if err != nil {
			return false, err.Error()
		}
		return total == 1 && len(msgs) == 1 && msgs[0].Type == "upload" && msgs[0].Subject == "Upload done" && msgs[0].Cause == "event",
			fmt.Sprintf("%d messages", total)
	})
	dlq := waitRecords(t, kafka, kafka.DLQTopic(), 2)
	var reasons []string
	for _, r := range dlq {
		reasons = append(reasons, header(r, bridge.HeaderError))
	}
	sort.Strings(reasons)
	if len(reasons) != 2 || reasons[0] != amqp.ReasonInvalidNotification || reasons[1] != amqp.ReasonUnknownAddressee {
		t.Fatalf("DLQ reasons %v, want %s and %s", reasons, amqp.ReasonInvalidNotification, amqp.ReasonUnknownAddressee)
	}
	bridgetest.WaitFor(t, wait, "the rejections counted", func() (bool, string) {
		got := b.value("lockstream_amqp_rejected_total", "reason", amqp.ReasonUnknownAddressee) +
			b.value("lockstream_amqp_rejected_total", "reason", amqp.ReasonInvalidNotification)
		return got == 2, fmt.Sprintf("%v rejected", got)
	})
}

// recordedThenLost records through InboxRecorder, then fails its first call as
// if the bridge had died after the commit and before the acknowledgement: the
// broker redelivers a message whose notification is recorded already.
type recordedThenLost struct {
	amqp.InboxRecorder
	mu    sync.Mutex
	calls int
}

func (r *recordedThenLost) RecordNotification(ctx context.Context, m amqp.Message) error {
	err := r.InboxRecorder.RecordNotification(ctx, m)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.calls == 1 && err == nil {
		return errors.New("connection lost before the acknowledgement")
	}
	return err
}

// newMember creates a client and a member of it with an email address.
func newMember(t *testing.T, pg *storage.Postgres) registry.Member {
	t.Helper()
	ctx := context.Background()
	client, err := registry.New(pg).CreateClient(ctx, registry.Client{Name: "acme", WebhookURL: "https://example.com/h", Secret: "whsec_x"})
	if err != nil {
		t.Fatal(err)
	}
	member, _, err := registry.New(pg).CreateMember(ctx, registry.Member{ClientID: client.ID, Name: "Alice", Email: "alice@example.com",
		Timezone: "UTC", Preferences: registry.DefaultMemberPreferences()}, []byte("alice-token-hash-"+client.ID), registry.Backfill{})
	if err != nil {
		t.Fatal(err)
	}
	return member
}

// runRetrier sends the outbox's emails to a test SMTP server until the test
// ends.
func runRetrier(t *testing.T, stores *storagetest.Stores) *bridgetest.SMTP {
	t.Helper()
	smtpServer := bridgetest.StartSMTP(t)
	mailer, err := email.New(email.Config{SMTPURL: smtpServer.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := retrier.New(retrier.Config{PollInterval: 20 * time.Millisecond},
		retrier.Deps{Store: stores.Postgres, Attempts: stores.ClickHouse, Email: mailer}, prometheus.NewRegistry(),
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("retrier: %v", err)
		}
	})
	return smtpServer
}

// inboxOf lists the member's messages, seen or not.
func inboxOf(t *testing.T, pg *storage.Postgres, memberID string) []inbox.Message {
	t.Helper()
	_, msgs, err := inbox.NewPostgresStore(pg).ListInbox(context.Background(), inbox.Query{MemberID: memberID, IncludeSeen: true,
		Sort: inbox.SortTimestamp, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// TestNotificationRecordedOncePerMessageID: the same notification published
// three times with one message-id — the first copy redelivered once more
// because its acknowledgement was lost after the commit, the other two
// published after the bridge restarted — makes one inbox message, at the AMQP
// timestamp, and one email; the copies are acknowledged and counted as
// duplicates.
func TestNotificationRecordedOncePerMessageID(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	member := newMember(t, stores.Postgres)
	smtpServer := runRetrier(t, stores)
	kafka := streamtest.Config(t, 3)
	rec := &recordedThenLost{InboxRecorder: amqp.InboxRecorder{Store: inbox.NewPostgresStore(stores.Postgres)}}
	b := setup(t, kafka, rec, nil, nil)

	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	msg := amqp091.Publishing{ContentType: "application/json", DeliveryMode: amqp091.Persistent,
		MessageId: "upload-42", Timestamp: at,
		Body: fmt.Appendf(nil, `{"member_id":%q,"subject":"Upload done","email":true}`, member.ID)}
	const key = "events.notification.update.upload"
	b.pub.PublishMessage(key, msg)
	bridgetest.WaitFor(t, wait, "the first copy recorded, then redelivered and acknowledged", func() (bool, string) {
		dups := b.value("lockstream_amqp_ignored_total", "category", "duplicate")
		return dups == 1, fmt.Sprintf("%v duplicates, %d messages", dups, len(inboxOf(t, stores.Postgres, member.ID)))
	})

	// A new bridge knows the message-id only from Postgres.
	b.stop()
	b.reg = prometheus.NewRegistry()
	b.start(rec, nil)
	b.waitConnected()
	b.pub.PublishMessage(key, msg)
	b.pub.PublishMessage(key, msg)
	bridgetest.WaitFor(t, wait, "the two later copies acknowledged as duplicates", func() (bool, string) {
		dups := b.value("lockstream_amqp_ignored_total", "category", "duplicate")
		return dups == 2, fmt.Sprintf("%v duplicates", dups)
	})

	msgs := inboxOf(t, stores.Postgres, member.ID)
	if len(msgs) != 1 || msgs[0].Subject != "Upload done" || !msgs[0].At.Equal(at) {
		t.Fatalf("inbox holds %d messages (%+v), want one at %s", len(msgs), msgs, at)
	}
	select {
	case m := <-smtpServer.Got:
		if m.To != "alice@example.com" {
			t.Errorf("email to %s", m.To)
		}
	case <-time.After(wait):
		t.Fatal("no email sent")
	}
	ds, err := stores.Postgres.ListClientDeliveries(context.Background(), member.ClientID, storage.DeliveryFilter{}, storage.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Channel != storage.ChannelEmail {
		t.Fatalf("deliveries %+v, want one email", ds)
	}
	// The one email delivery was sent: no other email can come.
	bridgetest.WaitFor(t, wait, "the email delivery SENT", func() (bool, string) {
		d, err := stores.Postgres.GetDelivery(context.Background(), ds[0].ID)
		if err != nil {
			return false, err.Error()
		}
		return d.State == storage.DeliverySent && d.Attempts == 1, fmt.Sprintf("%s after %d attempts", d.State, d.Attempts)
	})
	select {
	case m := <-smtpServer.Got:
		t.Errorf("a second email: %+v", m)
	default:
	}
}

// TestNotificationWithoutMessageID: without a message-id, copies are the
// messages with the same routing key, body and AMQP timestamp (none counts as
// one timestamp); another timestamp or another routing key is another
// notification.
func TestNotificationWithoutMessageID(t *testing.T) {
	t.Parallel()
	stores := storagetest.New(t)
	member := newMember(t, stores.Postgres)
	kafka := streamtest.Config(t, 3)
	b := setup(t, kafka, amqp.InboxRecorder{Store: inbox.NewPostgresStore(stores.Postgres)}, nil, nil)

	body := fmt.Appendf(nil, `{"member_id":%q,"subject":"Quota reached"}`, member.ID)
	t1 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	start := time.Now().Add(-time.Second) // Postgres's clock is this machine's
	publish := func(key string, at time.Time) {
		b.pub.PublishMessage(key, amqp091.Publishing{ContentType: "application/json", Timestamp: at, Body: body})
	}
	const quota, other = "events.notification.update.quota", "events.notification.update.other"
	publish(quota, t1)
	publish(quota, t1)                  // a copy
	publish(quota, t1.Add(time.Second)) // another notification
	publish(other, t1)                  // another notification
	publish(quota, time.Time{})
	publish(quota, time.Time{}) // a copy

	bridgetest.WaitFor(t, wait, "four notifications recorded, two copies acknowledged", func() (bool, string) {
		dups := b.value("lockstream_amqp_ignored_total", "category", "duplicate")
		n := len(inboxOf(t, stores.Postgres, member.ID))
		return dups == 2 && n == 4, fmt.Sprintf("%v duplicates, %d messages", dups, n)
	})
	// The one without a timestamp is at the time it was recorded.
	got := map[string]int{}
	for _, m := range inboxOf(t, stores.Postgres, member.ID) {
		switch {
		case m.At.Equal(t1), m.At.Equal(t1.Add(time.Second)):
			got[m.Type+"@"+m.At.UTC().Format(time.TimeOnly)]++
		case !m.At.Before(start):
			got[m.Type+"@recorded"]++
		default:
			got[m.Type+"@"+m.At.String()]++
		}
	}
	want := map[string]int{"quota@05:06:07": 1, "quota@05:06:08": 1, "other@05:06:07": 1, "quota@recorded": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("messages %v, want %v", got, want)
	}
}
