package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/event"
)

// NewNotification is a notification a batch (the fan-out's, or the
// endpoint notices') created, for the statements that follow it in the same
// transaction: its members' inbox messages, its client's lock and seq.
type NewNotification struct {
	ID, ClientID string
	Event        int // index in the batch's events, which orders the messages
}

// QueueClientSeqs queues the statement that gives each notification an
// endpoint-notice batch created its client's next seq, in the batch's event order,
// inside its transaction (the fan-out numbers in its insert). The statement moves each client's counter
// (client_event_seq) on by its count with an upsert, clients in id order so
// concurrent fan-outs never deadlock; the row lock is held to commit, so a
// later transaction's seqs commit after this one's: a reader never sees a seq
// while an earlier one is still uncommitted, and no seq is skipped or taken
// twice, whatever the number of fan-out processes. Only notifications the
// batch created (its INSERT … ON CONFLICT DO NOTHING returned them) get one,
// so a replayed event takes no seq.
func QueueClientSeqs(b *pgx.Batch, events []NotificationInput, created []NewNotification) {
	if len(created) == 0 {
		return
	}
	ids := make([]string, len(created))
	clients := make([]string, len(created))
	times := make([]time.Time, len(created))
	ords := make([]int, len(created))
	for i, n := range created {
		ids[i], clients[i], ords[i], times[i] = n.ID, n.ClientID, n.Event, events[n.Event].At
	}
	queueExec(b, fmt.Sprintf("numbering %d notifications per client", len(created)), clientSeqsSQL,
		ids, clients, times, ords)
}

// clientSeqsSQL is QueueClientSeqs' statement: $1-$4 the new notifications
// (id, client, event time, place in the batch).
const clientSeqsSQL = `
		WITH nn AS (
			SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[], $4::int[]) AS x (id, client_id, event_at, ord)
		), c AS (
			SELECT client_id, count(*) AS n FROM nn GROUP BY client_id
		), bumped AS (
			INSERT INTO client_event_seq AS q (client_id, last_seq)
			SELECT client_id, n FROM c ORDER BY client_id
			ON CONFLICT (client_id) DO UPDATE SET last_seq = q.last_seq + excluded.last_seq
			RETURNING q.client_id, q.last_seq
		), s AS (
			SELECT nn.id, nn.event_at,
			       b.last_seq - c.n + row_number() OVER (PARTITION BY nn.client_id ORDER BY nn.ord, nn.id) AS seq
			FROM nn JOIN bumped b ON b.client_id = nn.client_id JOIN c ON c.client_id = nn.client_id
		)
		UPDATE notifications n SET client_seq = s.seq
		FROM s WHERE n.id = s.id AND n.event_at = s.event_at`

// ListClientEvents returns up to limit of the client's events with a seq after
// after, in seq order: with no gap, since seqs commit in order. It returns
// ErrNotFound when the client does not exist. It reads the client's range of
// the (client_id, client_seq) index of each month partition.
func (p *Postgres) ListClientEvents(ctx context.Context, clientID string, after int64, limit int) ([]event.ClientEvent, error) {
	if uuid.Validate(clientID) != nil {
		return nil, fmt.Errorf("listing events of client %s: %w", clientID, ErrNotFound)
	}
	var exists bool
	rows, err := p.pool.Query(ctx, `
		SELECT true, n.client_seq, n.event_id, n.type, n.sensor_id, coalesce(s.address, ''), n.data, n.previous, n.event_at,
		       coalesce(n.site, ''), n.sensors, n.lost_since,
		       -- An operational notice's detail (its event id names its endpoint event).
		       CASE WHEN n.event_id LIKE '`+noticeEventPrefix+`%' THEN (
		           SELECT e.detail FROM endpoint_events e
		           WHERE e.id = substr(n.event_id, length('`+noticeEventPrefix+`') + 1)::bigint) ELSE '' END
		FROM clients c
		LEFT JOIN LATERAL (
			SELECT * FROM notifications n
			WHERE n.client_id = c.id AND n.client_seq > $2
			ORDER BY n.client_seq LIMIT $3
		) n ON true
		LEFT JOIN sensors s ON s.id = n.sensor_id
		WHERE c.id = $1
		ORDER BY n.client_seq`, clientID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("listing events of client %s: %w", clientID, err)
	}
	defer rows.Close()
	out := []event.ClientEvent{}
	for rows.Next() {
		var (
			e              event.ClientEvent
			seq            *int64
			eventID, typ   *string
			sensorID       *string
			data, previous *int16
			at             *time.Time
		)
		if err := rows.Scan(&exists, &seq, &eventID, &typ, &sensorID, &e.Sensor.Address, &data, &previous, &at, &e.Site, &e.Sensors, &e.LostSince, &e.Detail); err != nil {
			return nil, fmt.Errorf("listing events of client %s: %w", clientID, err)
		}
		if seq == nil {
			continue // the client, with no event after after
		}
		e.Seq, e.ID, e.Type, e.Sensor.ID, e.At = *seq, *eventID, event.Type(*typ), *sensorID, at.UTC()
		e.Data, e.Previous = outboxIntPtr(data), outboxIntPtr(previous)
		e.Severity = event.SeverityOf(e.Type, e.Data)
		e.SilentSeconds = event.SilentSeconds(e.LostSince, e.At)
		e.IncidentID = event.IncidentOf(e.ID)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing events of client %s: %w", clientID, err)
	}
	if !exists {
		return nil, fmt.Errorf("listing events of client %s: %w", clientID, ErrNotFound)
	}
	return out, nil
}
