package webapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"

	"github.com/lockstream/lockstream/internal/httpapi"
	"github.com/lockstream/lockstream/storage"
)

// NotificationPublisher publishes a free-form notification to the AMQP exchange as
// events.notification.update.<typ> and returns nil once the broker confirmed it
// (bridge/amqp.NotificationPublisher).
type NotificationPublisher interface {
	PublishNotification(ctx context.Context, typ string, body []byte) error
}

// WithNotificationPublisher makes POST /notification publish through publisher.
// Without one the route answers 503: recording a notification directly needs the
// members' inbox, which this server does not have.
func WithNotificationPublisher(publisher NotificationPublisher) Option {
	return func(s *Server) { s.notifications = publisher }
}

// notificationType is a type fit for a routing-key word.
var notificationType = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// maxSubjectLen bounds a notification's subject, in bytes.
const maxSubjectLen = 1000

// notificationBody is a free-form notification, as POST /v1/notifications takes it.
type notificationBody struct {
	ClientID string          `json:"client_id,omitempty"`
	MemberID string          `json:"member_id,omitempty"`
	Type     string          `json:"type"`
	Subject  string          `json:"subject"`
	Message  json.RawMessage `json:"message,omitempty"`
	Email    bool            `json:"email,omitempty"`
}

func (n notificationBody) validate() error {
	var errs httpapi.FieldErrors
	switch {
	case n.ClientID == "" && n.MemberID == "":
		errs.Add("member_id", "one of member_id and client_id is required")
	case n.ClientID != "" && n.MemberID != "":
		errs.Add("client_id", "give member_id or client_id, not both")
	}
	if !notificationType.MatchString(n.Type) {
		errs.Add("type", "want 1 to 64 letters, digits, '_' or '-' (it is the last word of the routing key)")
	}
	switch {
	case strings.TrimSpace(n.Subject) == "":
		errs.Add("subject", "required")
	case len(n.Subject) > maxSubjectLen:
		errs.Add("subject", "at most %d bytes", maxSubjectLen)
	}
	return errs.Err()
}

// notificationAccepted is the answer to POST /notification.
type notificationAccepted struct {
	RoutingKey string `json:"routing_key"`
}

// postNotification handles POST /notification (the CyVerse notification agent's
// route): it validates a free-form notification and publishes it to the AMQP
// exchange as events.notification.update.<type>, answering 202 once the broker
// confirmed it; the AMQP bridge records it from there. Without AMQP it records
// the notification directly, as POST /v1/notifications does.
func (s *Server) postNotification(w http.ResponseWriter, r *http.Request) error {
	if s.notifications == nil && s.inbox == nil {
		return unavailable("free-form notifications are not available: POST /notification publishes to AMQP " +
			"(set LOCKSTREAM_AMQP_URL), and recording them directly needs the members' inbox, which this server does not have")
	}
	var n notificationBody
	if err := s.decodeJSON(w, r, &n); err != nil {
		return err
	}
	if err := n.validate(); err != nil {
		return err
	}
	if s.notifications == nil {
		return s.recordNotification(w, r, storage.FreeFormNotification{ClientID: n.ClientID, MemberID: n.MemberID,
			Type: n.Type, Subject: n.Subject, Message: n.Message, Email: n.Email})
	}
	body, err := json.Marshal(n)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.PublishTimeout)
	defer cancel()
	if err := s.notifications.PublishNotification(ctx, n.Type, body); err != nil {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			return err
		}
		s.logger.ErrorContext(r.Context(), "publishing a notification", "type", n.Type, "err", err)
		w.Header().Set("Retry-After", retryAfterSeconds)
		return unavailable("the AMQP broker did not confirm the notification; sending it again is safe")
	}
	return httpapi.WriteJSON(w, http.StatusAccepted, notificationAccepted{RoutingKey: "events.notification.update." + n.Type})
}
