package storage

import (
	"context"
	"strings"

	"github.com/lockstream/lockstream/internal/pgutil"
)

// OutboxChannel is the Postgres notification channel on which a transaction
// that creates due deliveries (the fan-out's, fanout.PostgresStore) tells the
// retriers, delivered only when it commits. The payload is the channels of the
// new deliveries, comma-separated (`webhook,email`), so a retrier wakes only
// the lanes that have work; Postgres folds identical notifications of one
// transaction into one.
const OutboxChannel = "lockstream_outbox"

// ListenOutbox listens on OutboxChannel on a connection of its own (taken out
// of the pool) and calls notice with the channels of every notification's new
// deliveries, until ctx ends (it then returns nil) or the connection fails (it
// returns the error; call it again). ready is called once the LISTEN is in
// place: deliveries created while nobody listened are found by the caller's
// next look.
func (p *Postgres) ListenOutbox(ctx context.Context, ready func(), notice func([]Channel)) error {
	return pgutil.Listen(ctx, p.pool, OutboxChannel, "new deliveries", ready, func(payload string) {
		var channels []Channel
		for name := range strings.SplitSeq(payload, ",") {
			if name != "" {
				channels = append(channels, Channel(name))
			}
		}
		notice(channels)
	})
}
