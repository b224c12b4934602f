package storagetest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lockstream/lockstream/storage"
)

// ReplaceDeliveryAttempts makes attempts the Postgres attempt log of their
// deliveries: it deletes what FinishDeliveries logged for them and writes these
// as they are, without outcomes. Fixtures of the API's attempt log use it to
// give attempts known durations, errors and times.
func (s *Stores) ReplaceDeliveryAttempts(t testing.TB, attempts ...storage.DeliveryAttempt) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.PostgresURL)
	if err != nil {
		t.Fatalf("connecting to Postgres: %v", err)
	}
	defer conn.Close(ctx)
	ids := make([]string, len(attempts))
	for i, a := range attempts {
		ids[i] = a.DeliveryID
	}
	if _, err := conn.Exec(ctx, `DELETE FROM delivery_attempts WHERE delivery_id = ANY ($1::uuid[])`, ids); err != nil {
		t.Fatalf("deleting logged attempts: %v", err)
	}
	for _, a := range attempts {
		var client any
		if a.ClientID != "" {
			client = a.ClientID
		}
		if _, err := conn.Exec(ctx, `
			INSERT INTO delivery_attempts (delivery_id, client_id, sensor_id, event_id, channel, attempt, status,
			    recorded, http_status, error_type, error, answer_code, answer_message, duration_ms, at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, true, $8, $9, $10, $11, $12, $13, $14)`,
			a.DeliveryID, client, a.SensorID, a.EventID, string(a.Channel), a.Attempt, string(a.Status),
			a.HTTPStatus, a.ErrorType, a.Error, a.AnswerCode, a.AnswerMessage, a.Duration.Milliseconds(), a.At); err != nil {
			t.Fatalf("inserting attempt %d of delivery %s: %v", a.Attempt, a.DeliveryID, err)
		}
	}
}
