package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// DeliveryAttempt is one attempt at a delivery, as the history keeps it.
type DeliveryAttempt struct {
	// ID is the attempt's row in Postgres; ClickHouse dedupes copies by it.
	ID         int64
	DeliveryID string
	ClientID   string
	SensorID   string
	EventID    string
	Channel    Channel
	// Attempt is the attempt's number, from 1.
	Attempt int
	// Status is the state the attempt left the delivery in: SENT, RETRY, FAILED,
	// GIVEN_UP or SUPERSEDED.
	Status DeliveryState
	// HTTPStatus is the receiver's answer; 0 when none came back.
	HTTPStatus int
	// ErrorType is the notifier's class of the error (TIMEOUT, HTTP_STATUS, ...);
	// empty for a sent attempt.
	ErrorType string
	Error     string
	// AnswerCode and AnswerMessage are the code and message of the receiver's
	// answer body (Swrve's JSON); 0 and empty when it had none.
	AnswerCode    int
	AnswerMessage string
	// Duration is how long the attempt took; ClickHouse keeps milliseconds.
	Duration time.Duration
	// At is when the attempt ended; ClickHouse keeps seconds.
	At time.Time
	// Recorded is false for an attempt whose outcome was fenced off: its lease
	// had run out and the delivery had moved on (see DeliveryFinish.Attempt).
	Recorded bool
}

// InsertDeliveryAttempts writes attempts into delivery_attempts in one batch.
func (c *ClickHouse) InsertDeliveryAttempts(ctx context.Context, attempts []DeliveryAttempt) error {
	if len(attempts) == 0 {
		return nil
	}
	// The batch API with named columns is the only INSERT path that works on
	// ClickHouse 18.16.
	batch, err := c.conn.PrepareBatch(ctx, `INSERT INTO delivery_attempts (delivery_id, client_id, sensor_id,
		event_id, channel, attempt, status, http_status, error_type, error, answer_code, answer_message,
		duration_ms, at, attempt_id)`)
	if err != nil {
		return fmt.Errorf("preparing delivery attempts insert: %w", err)
	}
	defer func() { _ = batch.Abort() }()
	for _, a := range attempts {
		ms := min(a.Duration.Milliseconds(), math.MaxUint32)
		if err := batch.Append(a.DeliveryID, a.ClientID, a.SensorID, a.EventID, string(a.Channel),
			uint32(max(a.Attempt, 0)), string(a.Status), uint16(min(max(a.HTTPStatus, 0), math.MaxUint16)),
			a.ErrorType, a.Error, int32(min(max(a.AnswerCode, math.MinInt32), math.MaxInt32)), a.AnswerMessage,
			uint32(max(ms, 0)), a.At, uint64(max(a.ID, 0))); err != nil {
			return fmt.Errorf("appending attempt %d of delivery %s: %w", a.Attempt, a.DeliveryID, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("inserting %d delivery attempts: %w", len(attempts), err)
	}
	return nil
}

// DeliveryAttempts returns the attempts of the delivery copied to ClickHouse,
// oldest first, each once even if its batch was copied twice (rows written
// before attempt_id existed carry 0 and are told apart by attempt and time).
func (c *ClickHouse) DeliveryAttempts(ctx context.Context, deliveryID string) ([]DeliveryAttempt, error) {
	rows, err := c.conn.Query(ctx, `
		SELECT delivery_id, client_id, sensor_id, event_id, channel, attempt, status, http_status,
		       error_type, error, answer_code, answer_message, duration_ms, at, attempt_id
		FROM delivery_attempts WHERE delivery_id = ? ORDER BY at, attempt, attempt_id
		LIMIT 1 BY attempt_id, attempt, at`, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("reading attempts of delivery %s: %w", deliveryID, unreachable(storeClickHouse, err))
	}
	defer rows.Close()
	var out []DeliveryAttempt
	for rows.Next() {
		var (
			a                   DeliveryAttempt
			channel, status     string
			attempt, durationMS uint32
			httpStatus          uint16
			answerCode          int32
			id                  uint64
		)
		if err := rows.Scan(&a.DeliveryID, &a.ClientID, &a.SensorID, &a.EventID, &channel, &attempt, &status,
			&httpStatus, &a.ErrorType, &a.Error, &answerCode, &a.AnswerMessage, &durationMS, &a.At, &id); err != nil {
			return nil, fmt.Errorf("reading attempts of delivery %s: %w", deliveryID, err)
		}
		a.Channel, a.Status = Channel(channel), DeliveryState(status)
		a.Attempt, a.HTTPStatus, a.AnswerCode = int(attempt), int(httpStatus), int(answerCode)
		a.Duration = time.Duration(durationMS) * time.Millisecond
		a.ID, a.Recorded = int64(id), true
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading attempts of delivery %s: %w", deliveryID, err)
	}
	return out, nil
}

// attemptColumns are selected by the Postgres attempt queries, in scanAttempt's
// order.
const attemptColumns = `id, delivery_id::text, coalesce(client_id::text, ''), coalesce(sensor_id, ''),
	coalesce(event_id, ''), channel, attempt, status, recorded, http_status, error_type, error, answer_code,
	answer_message, duration_ms, at`

func scanAttempt(row pgx.CollectableRow) (DeliveryAttempt, error) {
	var (
		a  DeliveryAttempt
		ms int32
	)
	err := row.Scan(&a.ID, &a.DeliveryID, &a.ClientID, &a.SensorID, &a.EventID, &a.Channel, &a.Attempt,
		&a.Status, &a.Recorded, &a.HTTPStatus, &a.ErrorType, &a.Error, &a.AnswerCode, &a.AnswerMessage, &ms, &a.At)
	a.Duration = time.Duration(ms) * time.Millisecond
	return a, err
}

// DeliveryAttempts returns every attempt of the delivery, oldest first, from
// Postgres: FinishDeliveries writes them with the outcomes, so this log is
// complete the moment the outcome is (ClickHouse's copy follows later).
func (p *Postgres) DeliveryAttempts(ctx context.Context, deliveryID string) ([]DeliveryAttempt, error) {
	if uuid.Validate(deliveryID) != nil {
		return nil, nil
	}
	rows, err := p.pool.Query(ctx, `SELECT `+attemptColumns+`
		FROM delivery_attempts WHERE delivery_id = $1 ORDER BY id`, deliveryID)
	if err != nil {
		return nil, fmt.Errorf("reading attempts of delivery %s: %w", deliveryID, err)
	}
	out, err := pgx.CollectRows(rows, scanAttempt)
	if err != nil {
		return nil, fmt.Errorf("reading attempts of delivery %s: %w", deliveryID, err)
	}
	return out, nil
}

// CopyDeliveryAttempts hands up to limit attempts not copied yet to copy
// (the ClickHouse insert) and moves the copy's cursor past them once it
// returns nil, in one transaction that holds the cursor (another copier
// meanwhile copies nothing and returns 0). The log is insert-only: the cursor
// (attempt_copy_cursors, migration 00201) is a pair of snapshots, and a batch
// is the rows whose writing transaction (xid) is visible in the target
// snapshot and was not in the previous one, in id order from last_id; when a
// window has no more, previous becomes target and the next call takes a new
// one. A crash after copy and before the commit copies the batch again: the
// receiving side dedupes by DeliveryAttempt.ID. It returns how many it copied.
func (p *Postgres) CopyDeliveryAttempts(ctx context.Context, limit int, copy func(context.Context, []DeliveryAttempt) error) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		// The window's bounds as bigints, for the log's BRIN index on
		// xid::text::bigint (migration 00247): passed as parameters, so the
		// plan scans the block ranges that can hold them.
		var lastID, from, to int64
		err := tx.QueryRow(ctx, `
			UPDATE attempt_copy_cursors c SET target = coalesce(c.target, pg_current_snapshot())
			FROM (SELECT name FROM attempt_copy_cursors WHERE name = 'clickhouse' FOR UPDATE SKIP LOCKED) AS l
			WHERE c.name = l.name
			RETURNING c.last_id, pg_snapshot_xmin(c.previous)::text::bigint, pg_snapshot_xmax(c.target)::text::bigint`).
			Scan(&lastID, &from, &to)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another copier holds the cursor
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT `+attemptColumns+`
			FROM delivery_attempts a, attempt_copy_cursors c
			WHERE c.name = 'clickhouse'
			  AND a.xid::text::bigint >= $3 AND a.xid::text::bigint < $4
			  AND pg_visible_in_snapshot(a.xid, c.target) AND NOT pg_visible_in_snapshot(a.xid, c.previous)
			  AND a.id > $2
			ORDER BY a.id LIMIT $1`, limit, lastID, from, to)
		if err != nil {
			return err
		}
		batch, err := pgx.CollectRows(rows, scanAttempt)
		if err != nil {
			return err
		}
		if len(batch) > 0 {
			if err := copy(ctx, batch); err != nil {
				return err
			}
		}
		n = len(batch)
		if n == limit {
			_, err = tx.Exec(ctx, `UPDATE attempt_copy_cursors SET last_id = $1 WHERE name = 'clickhouse'`, batch[n-1].ID)
			return err
		}
		// The window is done: the next call opens one from its target.
		_, err = tx.Exec(ctx, `UPDATE attempt_copy_cursors SET previous = target, target = NULL, last_id = 0
			WHERE name = 'clickhouse'`)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("copying delivery attempts: %w", err)
	}
	return n, nil
}
