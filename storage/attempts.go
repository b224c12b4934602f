package storage

import (
	"context"
	"fmt"
	"math"
	"time"
)

// DeliveryAttempt is one attempt at a delivery, as the history keeps it.
type DeliveryAttempt struct {
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
		duration_ms, at)`)
	if err != nil {
		return fmt.Errorf("preparing delivery attempts insert: %w", err)
	}
	defer func() { _ = batch.Abort() }()
	for _, a := range attempts {
		ms := min(a.Duration.Milliseconds(), math.MaxUint32)
		if err := batch.Append(a.DeliveryID, a.ClientID, a.SensorID, a.EventID, string(a.Channel),
			uint32(max(a.Attempt, 0)), string(a.Status), uint16(min(max(a.HTTPStatus, 0), math.MaxUint16)),
			a.ErrorType, a.Error, int32(min(max(a.AnswerCode, math.MinInt32), math.MaxInt32)), a.AnswerMessage,
			uint32(max(ms, 0)), a.At); err != nil {
			return fmt.Errorf("appending attempt %d of delivery %s: %w", a.Attempt, a.DeliveryID, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("inserting %d delivery attempts: %w", len(attempts), err)
	}
	return nil
}

// DeliveryAttempts returns every recorded attempt of the delivery, oldest first.
func (c *ClickHouse) DeliveryAttempts(ctx context.Context, deliveryID string) ([]DeliveryAttempt, error) {
	rows, err := c.conn.Query(ctx, `
		SELECT delivery_id, client_id, sensor_id, event_id, channel, attempt, status, http_status,
		       error_type, error, answer_code, answer_message, duration_ms, at
		FROM delivery_attempts WHERE delivery_id = ? ORDER BY at, attempt`, deliveryID)
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
		)
		if err := rows.Scan(&a.DeliveryID, &a.ClientID, &a.SensorID, &a.EventID, &channel, &attempt, &status,
			&httpStatus, &a.ErrorType, &a.Error, &answerCode, &a.AnswerMessage, &durationMS, &a.At); err != nil {
			return nil, fmt.Errorf("reading attempts of delivery %s: %w", deliveryID, err)
		}
		a.Channel, a.Status = Channel(channel), DeliveryState(status)
		a.Attempt, a.HTTPStatus, a.AnswerCode = int(attempt), int(httpStatus), int(answerCode)
		a.Duration = time.Duration(durationMS) * time.Millisecond
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading attempts of delivery %s: %w", deliveryID, err)
	}
	return out, nil
}
