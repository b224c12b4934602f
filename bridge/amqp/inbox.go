package amqp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lockstream/lockstream/bridge"
	"github.com/lockstream/lockstream/storage"
)

// Reasons an InboxRecorder rejects a notification for.
const (
	// ReasonInvalidNotification: the body is not a notification POST
	// /v1/notifications would take.
	ReasonInvalidNotification = "invalid_notification"
	// ReasonUnknownAddressee: the member or client it names does not exist.
	ReasonUnknownAddressee = "unknown_addressee"
)

// NotificationStore records a free-form notification into members' inboxes
// (storage.Postgres).
type NotificationStore interface {
	RecordNotification(ctx context.Context, n storage.FreeFormNotification) (storage.RecordedNotification, error)
}

// InboxRecorder is the NotificationRecorder of a lockstream with members: it
// records events.notification.update.<type> as POST /v1/notifications would.
// A body that is not such a notification, whose type differs from the routing
// key's, or that names no existing member or client is unrecoverable; a store
// error is not (the message comes back after a pause).
type InboxRecorder struct {
	Store NotificationStore
}

// RecordNotification implements NotificationRecorder.
func (r InboxRecorder) RecordNotification(ctx context.Context, typ string, body []byte) error {
	var n storage.FreeFormNotification
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&n); err != nil {
		return bridge.Reject(ReasonInvalidNotification, "not a notification object: %v", err)
	}
	if n.Type == "" {
		n.Type = typ
	}
	if n.Type != typ {
		return bridge.Reject(ReasonInvalidNotification, "type %q differs from the routing key's %q", n.Type, typ)
	}
	if errs := n.Check(); len(errs) > 0 {
		return bridge.Reject(ReasonInvalidNotification, "%s: %s", errs[0].Field, errs[0].Detail)
	}
	_, err := r.Store.RecordNotification(ctx, n)
	if errors.Is(err, storage.ErrNotFound) {
		return bridge.Reject(ReasonUnknownAddressee, "no member %q or client %q", n.MemberID, n.ClientID)
	}
	if err != nil {
		return fmt.Errorf("recording a notification: %w", err)
	}
	return nil
}
