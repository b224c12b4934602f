package fanout

import (
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/storage"
)

// queueOutboxNotify queues, in a batch of the fan-out's transaction, the
// notification on storage.OutboxChannel of new due deliveries on the given
// channels; nothing when there are none.
func queueOutboxNotify(b *pgx.Batch, created map[storage.Channel]int) {
	if payload := outboxPayload(created); payload != "" {
		storage.QueueExec(b, "notifying the outbox", outboxNotifySQL, payload)
	}
}

const outboxNotifySQL = `SELECT pg_notify('` + storage.OutboxChannel + `', $1)`

// outboxPayload is the notification's payload: the channels with new
// deliveries, sorted and comma-separated; "" when there are none.
func outboxPayload(created map[storage.Channel]int) string {
	var names []string
	for ch, n := range created {
		if n > 0 {
			names = append(names, string(ch))
		}
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// ListenOutbox listens on OutboxChannel on a connection of its own (taken out
