package amqp_test

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/lockstream/lockstream/bridge"
	"github.com/lockstream/lockstream/bridge/amqp"
	"github.com/lockstream/lockstream/bridge/bridgetest"
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
	client, err := stores.Postgres.CreateClient(ctx, storage.Client{Name: "acme", WebhookURL: "https://example.com/h", Secret: "whsec_x"})
	if err != nil {
		t.Fatal(err)
	}
	member, _, err := stores.Postgres.CreateMember(ctx, storage.Member{ClientID: client.ID, Name: "Alice",
		Timezone: "UTC", Preferences: storage.DefaultMemberPreferences()}, []byte("alice-token-hash"), storage.Backfill{})
	if err != nil {
		t.Fatal(err)
	}
	kafka := streamtest.Config(t, 3)
	b := setup(t, kafka, amqp.InboxRecorder{Store: stores.Postgres}, nil, nil)

	b.pub.Publish("events.notification.update.upload", []byte(`{"member_id":"01a20a61-8608-7732-b6ee-92df4cb0788b","subject":"lost"}`))
	b.pub.Publish("events.notification.update.upload", []byte(`{"member_id":`))
	b.pub.Publish("events.notification.update.upload", []byte(fmt.Sprintf(`{"member_id":%q,"subject":"Upload done","message":{"file":"a.txt"}}`, member.ID)))

	bridgetest.WaitFor(t, wait, "the notification in the member's inbox", func() (bool, string) {
		total, msgs, err := stores.Postgres.ListInbox(ctx, storage.InboxQuery{MemberID: member.ID, Sort: storage.SortTimestamp, Limit: 10})
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
