package webapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/lockstream/lockstream/inbox"
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

// agentNotification is POST /notification's body: lockstream's, or the
// cyverse-de/notification-agent's, whose clients name the member by user (its
// username or id) instead of member_id, send message as its text, and may
// add email_template and payload.
type agentNotification struct {
	notificationBody
	User          string          `json:"user,omitempty"`
	EmailTemplate string          `json:"email_template,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
}

// agentSuccess is the agent's answer to POST /notification.
type agentSuccess struct {
	Success bool `json:"success"`
}

// resolveAgent turns the agent's form into lockstream's: user becomes
// member_id, and the message is the payload when one is given (what v1's GET
// /messages shows as payload), else the text, else the subject (the agent's
// default). email_template is accepted and unused: lockstream's emails have
// their own template.
func (s *Server) resolveAgent(ctx context.Context, n *agentNotification) error {
	var errs httpapi.FieldErrors
	if n.ClientID != "" || n.MemberID != "" {
		errs.Add("user", "give user (the notification agent's form) or member_id/client_id, not both")
		return errs.Err()
	}
	if s.members == nil {
		return membersDisabled()
	}
	m, err := s.members.MemberByUser(ctx, n.User)
	if errors.Is(err, storage.ErrNotFound) {
		errs.Add("user", "no member has the username or id %q", n.User)
		return errs.Err()
	}
	if err != nil {
		return fmt.Errorf("finding user %q: %w", n.User, err)
	}
	n.MemberID = m.ID
	switch {
	case len(n.Payload) > 0 && string(n.Payload) != "null":
		n.Message = n.Payload
	case len(n.Message) == 0 || string(n.Message) == "null":
		n.Message, _ = json.Marshal(n.Subject) // a string always encodes
	}
	return nil
}

// postNotification handles POST /notification (the CyVerse notification agent's
// route): it validates a free-form notification and publishes it to the AMQP
// exchange as events.notification.update.<type>, answering 202 once the broker
// confirmed it; the AMQP bridge records it from there. Without AMQP it records
// the notification directly, as POST /v1/notifications does.
// The notification agent's own body (user, payload) is taken too: see
// agentNotification.
func (s *Server) postNotification(w http.ResponseWriter, r *http.Request) error {
	if s.notifications == nil && s.inbox == nil {
		return unavailable("free-form notifications are not available: POST /notification publishes to AMQP " +
			"(set LOCKSTREAM_AMQP_URL), and recording them directly needs the members' inbox, which this server does not have")
	}
	var posted agentNotification
	if err := s.decodeJSON(w, r, &posted); err != nil {
		return err
	}
	agent := posted.User != ""
	if agent {
		if err := s.resolveAgent(r.Context(), &posted); err != nil {
			return err
		}
	}
	n := posted.notificationBody
	if err := n.validate(); err != nil {
		return err
	}
	if s.notifications == nil {
		recorded, err := s.storeNotification(r.Context(), inbox.FreeFormNotification{ClientID: n.ClientID,
			MemberID: n.MemberID, Type: n.Type, Subject: n.Subject, Message: n.Message, Email: n.Email})
		switch {
		case err != nil:
			return err
		case agent:
			return httpapi.WriteJSON(w, http.StatusOK, agentSuccess{Success: true})
		}
		return httpapi.WriteJSON(w, http.StatusAccepted, recorded)
	}
	if err := s.publishNotification(w, r, n); err != nil {
		return err
	}
	if agent {
		return httpapi.WriteJSON(w, http.StatusOK, agentSuccess{Success: true})
	}
	return httpapi.WriteJSON(w, http.StatusAccepted, notificationAccepted{RoutingKey: "events.notification.update." + n.Type})
}

// publishNotification publishes n to the AMQP exchange and waits for the
// broker's confirm.
func (s *Server) publishNotification(w http.ResponseWriter, r *http.Request, n notificationBody) error {
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
	return nil
}
