package amqp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lockstream/lockstream/bridge"
	"github.com/lockstream/lockstream/inbox"
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
// (inbox.PostgresStore).
type NotificationStore interface {
	RecordNotification(ctx context.Context, n inbox.FreeFormNotification) (inbox.RecordedNotification, error)
}

// InboxRecorder is the NotificationRecorder of a lockstream with members: it
// records events.notification.update.<type> as POST /v1/notifications would.
// A body that is not such a notification, whose type differs from the routing
// key's, or that names no existing member or client is unrecoverable; a store
// error is not (the message comes back after a pause).
//
// It records each message once, however often it arrives (redelivered after a
// crash or a requeue, published twice): under NotificationKey, stored with the
// inbox messages. The AMQP timestamp, when set, is the messages' time.
type InboxRecorder struct {
	Store NotificationStore
}

// NotificationKey is what identifies m across copies: its message-id, or when
// it has none a hash of its routing key, AMQP timestamp and body (copies of a
// message without message-id or timestamp are then those with the same routing
// key and body).
func NotificationKey(m Message) string {
	if m.MessageID != "" {
		return "amqp-id:" + m.MessageID
	}
	var ts int64
	if !m.Timestamp.IsZero() {
		ts = m.Timestamp.Unix()
	}
	h := sha256.New()
	// Length-prefixed, so no two different triples hash the same bytes.
	_, _ = fmt.Fprintf(h, "%d:%s|%d|", len(m.RoutingKey), m.RoutingKey, ts)
	_, _ = h.Write(m.Body)
	return "amqp-sha256:" + hex.EncodeToString(h.Sum(nil))
}

// RecordNotification implements NotificationRecorder.
func (r InboxRecorder) RecordNotification(ctx context.Context, m Message) error {
	typ := m.Type
	var n inbox.FreeFormNotification
	dec := json.NewDecoder(bytes.NewReader(m.Body))
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
	n.Key, n.At = NotificationKey(m), m.Timestamp
	rec, err := r.Store.RecordNotification(ctx, n)
	if err == nil && rec.Duplicate {
		return ErrDuplicate
	}
	if errors.Is(err, storage.ErrNotFound) {
		return bridge.Reject(ReasonUnknownAddressee, "no member %q or client %q", n.MemberID, n.ClientID)
	}
	if err != nil {
		return fmt.Errorf("recording a notification: %w", err)
	}
	return nil
}
