package storagetest

import (
	"context"
	"fmt"
	"time"

	"github.com/lockstream/lockstream/storage"
)

// The outcomes of one delivery, recorded through FinishDeliveries the way the
// retrier records a batch of them: fixtures use them to put deliveries in known
// states.

// CompleteDelivery records that attempt of the delivery was accepted (SENT).
func CompleteDelivery(ctx context.Context, pg *storage.Postgres, id string, attempt, httpStatus int) error {
	_, err := finishOne(ctx, pg, storage.DeliveryFinish{ID: id, Attempt: attempt, State: storage.DeliverySent,
		HTTPStatus: httpStatus})
	return err
}

// RescheduleDelivery records a retryable failure of that attempt: the delivery is
// due again at next (RETRY), or SUPERSEDED when a newer state waits behind it. It
// returns the state the delivery is in now.
func RescheduleDelivery(ctx context.Context, pg *storage.Postgres, id string, attempt int, next time.Time, reason string, httpStatus int) (storage.DeliveryState, error) {
	return finishOne(ctx, pg, storage.DeliveryFinish{ID: id, Attempt: attempt, State: storage.DeliveryRetry,
		NextAttemptAt: next, Error: reason, HTTPStatus: httpStatus})
}

// FailDelivery records a failure of that attempt that no retry would fix (FAILED).
func FailDelivery(ctx context.Context, pg *storage.Postgres, id string, attempt int, reason string, httpStatus int) error {
	_, err := finishOne(ctx, pg, storage.DeliveryFinish{ID: id, Attempt: attempt, State: storage.DeliveryFailed,
		Error: reason, HTTPStatus: httpStatus})
	return err
}

// GiveUpDelivery records that the delivery's last allowed attempt failed
// (GIVEN_UP, or SUPERSEDED when a newer state waits behind it). It returns the
// state the delivery is in now.
func GiveUpDelivery(ctx context.Context, pg *storage.Postgres, id string, attempt int, reason string, httpStatus int) (storage.DeliveryState, error) {
	return finishOne(ctx, pg, storage.DeliveryFinish{ID: id, Attempt: attempt, State: storage.DeliveryGivenUp,
		Error: reason, HTTPStatus: httpStatus})
}

// finishOne records one outcome and returns the delivery's new state, or
// storage.ErrConflict when the outcome was fenced off (the delivery is not in
// flight as that attempt).
func finishOne(ctx context.Context, pg *storage.Postgres, f storage.DeliveryFinish) (storage.DeliveryState, error) {
	done, err := pg.FinishDeliveries(ctx, []storage.DeliveryFinish{f})
	if err != nil {
		return "", err
	}
	if len(done) == 0 {
		return "", fmt.Errorf("finishing delivery %s as %s: %w: not in flight as attempt %d",
			f.ID, f.State, storage.ErrConflict, f.Attempt)
	}
	return done[0].State, nil
}
